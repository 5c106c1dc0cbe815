"""One forward pass of a fused network, for Nsight Compute to capture (its kernels in place: the
input each fused block really receives, the L2 state the previous kernel leaves).

    ncu --profile-from-start off --clock-control none -k regex:"stem|convfirst|block_fusion|se_kernel" \\
        --section SpeedOfLight --section WarpStateStats ... \\
        python -m cuda_kernels.profile_network convfirstnet_h200

The model is built and fused as `perfmodel bench MODEL --backend cuda_kernels` builds it (the same
switches apply), warmed up outside the profiled range, then one forward runs between
cudaProfilerStart and cudaProfilerStop, so `--profile-from-start off` captures exactly one pass.
"""

from __future__ import annotations

import argparse
import sys
import warnings

import torch


def main(argv: list[str] | None = None) -> int:
    from perfmodel.bench import fused_model
    from perfmodel.harness import build_cuda_model, example_input
    from perfmodel.spec import load_spec

    parser = argparse.ArgumentParser(description="One forward pass of a fused network between "
                                     "cudaProfilerStart and Stop, for Nsight Compute (--profile-from-start off).")
    parser.add_argument("model", help="a built-in spec (convfirstnet_h200, efficientnet_b0, ...) or a spec YAML")
    parser.add_argument("--batch", type=int, default=None, help="overrides the spec's batch")
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args(argv)

    spec = load_spec(args.model).with_overrides(batch=args.batch)
    torch.backends.cudnn.benchmark = True
    model = build_cuda_model(spec)
    inputs = [example_input(meta) for meta in spec.input_metas]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, fusion = fused_model(model, inputs)
    print(f"fused {fusion['fused_blocks']}, fallbacks {fusion['fallback_count']}", flush=True)
    with torch.inference_mode():
        for _ in range(args.warmup):
            model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    print("profiled one forward", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
