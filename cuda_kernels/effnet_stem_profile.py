"""Run EfficientNet's fused stem twice at one shape, for Nsight Compute to capture (the second launch is the one to
read: the first pays the one-time set-up; ``cuda_kernels.ncu_lines PREFIX CSV stem_kernel LABEL`` prints it):

    ncu -k regex:stem_kernel --csv --page raw --log-file stem.csv python -m cuda_kernels.effnet_stem_profile

``--unit``: the stem and block 1.0 of EfficientNet-B0 as one unit instead (stem_mbconv.py; its kernel stem_dw_kernel,
then the SE and the projection).
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
    parser.add_argument("--unit", action="store_true", help="B0's stem and block 1.0 as one unit")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    x = torch.randn(args.batch, 3, args.size, args.size, device="cuda", dtype=torch.float16)
    x = x.contiguous(memory_format=torch.channels_last)
    if args.unit:
        import torchvision

        from cuda_kernels import stem_mbconv as sm
        from perfmodel.zoo import fold_batchnorm

        model = fold_batchnorm(torchvision.models.efficientnet_b0().eval())
        unit = sm.FusedStemMBConv(model.features[0], model.features[1][0]).cuda()
        run = lambda: sm.run(x, unit)  # noqa: E731
    else:
        conv = nn.Conv2d(3, args.channels, 3, stride=2, padding=1).cuda()
        weights = es.prepare_weights(conv.weight, conv.bias)
        run = lambda: es.run(x, weights)  # noqa: E731
    for _ in range(2):
        run()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
