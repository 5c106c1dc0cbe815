"""Launch the fused kernel once per case, for a profiler (Nsight Compute) to capture.

    ncu --clock-control none -k regex:block_fusion --section SpeedOfLight \\
        python -m cuda_kernels.profile ffn:256:4:28 convfirst:64:4:56
"""

from __future__ import annotations

import sys

import torch

from cuda_kernels.bench import fused_weights, make_block, parse_case


def main(argv: list[str]) -> int:
    import cuda_kernels

    for text in argv:
        case = parse_case(text)
        block = make_block(case)
        x = torch.randn(case.batch, case.channels, case.size, case.size, device="cuda", dtype=torch.float16)
        x = x.contiguous(memory_format=torch.channels_last)
        cuda_kernels.run_block(x, fused_weights(case, block), residual=case.block == "convfirst")
        torch.cuda.synchronize()
        print(f"launched {case.name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
