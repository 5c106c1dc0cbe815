"""Run EfficientNet's fused stem twice at one shape, for Nsight Compute to capture (the second launch is the one to
read: the first pays the one-time set-up; ``cuda_kernels.ncu_lines PREFIX CSV stem_kernel LABEL`` prints it):

    ncu -k regex:stem_kernel --csv --page raw --log-file stem.csv python -m cuda_kernels.effnet_stem_profile
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


def main(argv: list[str] | None = None) -> int:
    from cuda_kernels import effnet_stem as es

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--size", type=int, default=224, help="input height and width")
    parser.add_argument("--channels", type=int, default=32, choices=es.WIDTHS)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    conv = nn.Conv2d(3, args.channels, 3, stride=2, padding=1).cuda()
    x = torch.randn(args.batch, 3, args.size, args.size, device="cuda", dtype=torch.float16)
    weights = es.prepare_weights(conv.weight, conv.bias)
    for _ in range(2):
        es.run(x.contiguous(memory_format=torch.channels_last), weights)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
