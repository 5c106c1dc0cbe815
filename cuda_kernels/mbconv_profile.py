"""Run fused MBConv blocks of a torchvision EfficientNet once each, for Nsight Compute to capture.

    ncu --clock-control none -k regex:"expand_dw|se_|project" --section SpeedOfLight \\
        --section Occupancy --section WarpStateStats --section SchedulerStats \\
        python -m cuda_kernels.mbconv_profile --version 3 features.2.1 features.1.0

Each block runs at `--batch` with random weights and realistic BN statistics (as the benchmark
builds them), after one untimed call so that the profiled launch is not the first.
"""

from __future__ import annotations

import argparse
import sys

import torch


def block_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every per-block device tool takes: module paths, the model, the batch and the MBConv version."""
    from cuda_kernels.mbconv import DEFAULT_VERSION, VERSIONS

    parser.add_argument("paths", nargs="+", help="module paths, e.g. features.2.1")
    parser.add_argument("--model", default="efficientnet_b0")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--version", type=int, default=DEFAULT_VERSION, choices=VERSIONS)


def fused_blocks(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """(path, fused block, input) for each of args.paths: the block of args.model with random weights and realistic BN
    statistics (as the benchmark builds them), BN folded, fused at args.version; an input of args.batch channels-last
    fp16 images. A path that is not an MBConv of the model is a usage error."""
    import torchvision

    import cuda_kernels
    from cuda_kernels.mbconv import block_params
    from cuda_kernels.mbconv_bench import RESOLUTION, network_blocks
    from perfmodel.harness import randomize_batchnorm
    from perfmodel.zoo import fold_batchnorm

    torch.manual_seed(0)
    model = randomize_batchnorm(getattr(torchvision.models, args.model)()).eval()
    shapes = {path: shape for path, _, shape in network_blocks(model, RESOLUTION[args.model])}
    for path in args.paths:
        if path not in shapes:
            parser.error(f"{path} is not an MBConv of {args.model}")
        block = fold_batchnorm(model.get_submodule(path)).cuda().half()
        fused = cuda_kernels.FusedMBConv(block_params(block), version=args.version)
        x = torch.randn(args.batch, *shapes[path], device="cuda", dtype=torch.float16)
        yield path, fused, x.contiguous(memory_format=torch.channels_last)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    block_arguments(parser)
    args = parser.parse_args(argv)
    for path, fused, x in fused_blocks(parser, args):
        with torch.no_grad():
            fused(x)  # the one-time attribute and occupancy queries happen here
            torch.cuda.synchronize()
            fused(x)
            torch.cuda.synchronize()
        print(f"ran {path} (v{args.version}, batch {args.batch}, input {tuple(x.shape[1:])})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
