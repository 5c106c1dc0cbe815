"""Time a fused MBConv block with its batch split into chunks, the chunks on two CUDA streams, against the whole batch.

The three kernels of a block run one after another (kernel 1, the SE, the projection), and each waits for the one
before it over the whole batch: the SE needs every image's pool. Kernel 1 is issue-bound and the projection
streams D from DRAM, so chunk i's SE and projection could run beside chunk i + 1's kernel 1, and each kernel's last,
half-empty round would be filled by the other stream. This script measures whether the GPU does overlap them,
before anything is built around it (NOTES.md "Session 27"):

    python -m cuda_kernels.mbconv_split --block features.3.1 --block features.4.1 --chunks 2 --chunks 4 -o split.json

Per block of EfficientNet-B0 (random weights, realistic BN statistics, batch 128): the whole batch, then for each
chunk count the chunks on one stream (what the chunking alone costs), on two streams, and on two streams of which the
even chunks' has the higher priority (the earlier chunk's SE and projection before the later chunk's kernel 1 where
both wait for an SM); each variant one CUDA graph, timed as replays (CUDA events, L2 flushed before every replay) in
interleaved runs. Every chunk is written into its slice of one output (poisoned first), which is compared with the
whole batch's before anything is timed, and recorded (bit for bit or not, relative error); a relative error past 1e-3
stops the run. Bit for bit holds where a chunk runs the kernels the whole batch runs; the wgmma projection's split
rule looks at the row count, so at 4.1-6.1 a chunk may run the split kernel (the hidden sum in another order) where
the whole batch does not (s28 call 1: relative error 3.9e-6 at 5.1).

Measured (s28 call 1, examples/measurements/mbconv/s28): two chunks on two streams -3.0 us at 2.1 and 3.1, +3.6 at
4.1, +8.4 at 5.1 against the whole batch; four chunks slower everywhere. The likely reason (not measured): kernel 1's
two CTAs an SM leave no room for the other stream's CTAs, so these queue behind it. The pipeline was not built.
"""

from __future__ import annotations

import argparse
import sys

import torch

from cuda_kernels._bench_common import command_line
from perfmodel.harness import Timer, cuda_graph_replay, environment, randomize_batchnorm, relative_error


def chunk_bounds(batch: int, chunks: int) -> list[tuple[int, int]]:
    """[start, end) of `chunks` equal chunks of the batch, each an even number of images (kernel 1 pairs images into
    items where a band is the image: even chunks keep the whole batch's pairs; the projection may still pick another
    kernel for a chunk's row count, module docstring)."""
    if chunks < 1 or batch % (2 * chunks):
        raise ValueError(f"{batch} images do not split into {chunks} chunks of an even size")
    size = batch // chunks
    return [(i * size, (i + 1) * size) for i in range(chunks)]


def split_run(run_chunk, bounds: list[tuple[int, int]], streams: list[torch.cuda.Stream]):
    """A callable that runs run_chunk(start, end) for each chunk, chunk i on streams[i % len(streams)], forked from
    and joined back to the current stream (so that a CUDA graph captures the chunks as parallel branches)."""
    def run():
        main = torch.cuda.current_stream()
        for s in streams:
            s.wait_stream(main)
        for i, (a, b) in enumerate(bounds):
            with torch.cuda.stream(streams[i % len(streams)]):
                run_chunk(a, b)
        for s in streams:
            main.wait_stream(s)
    return run


def b0_blocks(paths: list[str], batch: int):
    """EfficientNet-B0's blocks at `paths`, in the network's order (random weights, realistic BN statistics, the
    RNG seeded once before the model), BN folded as the fused operator takes them: (path, params, weights, x), x a
    random channels-last float16 batch. Builds the MBConv extension first; a generator, so that each block's
    tensors exist only while it is timed."""
    import torchvision

    from cuda_kernels import mbconv as mb
    from cuda_kernels._build import load_mbconv_extension
    from cuda_kernels.mbconv_bench import network_blocks
    from perfmodel.zoo import fold_batchnorm

    load_mbconv_extension()
    torch.manual_seed(0)
    model = randomize_batchnorm(torchvision.models.efficientnet_b0()).eval()
    for path, block, shape in network_blocks(model, 224):
        if path in paths:
            params = mb.block_params(fold_batchnorm(block.cuda().half().to(memory_format=torch.channels_last)))
            x = torch.randn(batch, *shape, device="cuda", dtype=torch.float16).contiguous(
                memory_format=torch.channels_last)
            yield path, params, mb.prepare_weights(params), x


def write_blocks_file(output: str, module: str, argv: list[str] | None, batch: int, cases: list[dict],
                      method: dict) -> None:
    """The measurement file of a per-block script over B0's blocks (fused kernels only)."""
    from perfmodel.measure import write_measurement

    write_measurement(
        output, command=command_line(module, argv), environment=environment(),
        workload={"kind": "blocks", "blocks": ["torchvision MBConv"], "model": "efficientnet_b0", "batch": batch,
                  "dtype": "float16", "memory_format": "channels_last", "backends": ["cuda_kernels"]},
        method=method, results={"cases": cases})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block", action="append", required=True, help="module path in EfficientNet-B0 (repeatable)")
    parser.add_argument("--chunks", action="append", type=int, required=True, help="chunk count (repeatable)")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--runs", type=int, default=2, help="times each variant is timed (interleaved)")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args(argv)
    for c in args.chunks:
        try:
            chunk_bounds(args.batch, c)
        except ValueError as exc:
            parser.error(str(exc))
    from cuda_kernels import mbconv as mb

    timer = Timer(5, args.repeats, flush_l2=True)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    # the earlier chunks first where kernels of both streams wait for an SM (a lower number is a higher priority)
    ranked = [torch.cuda.Stream(priority=-1), torch.cuda.Stream(priority=0)]
    cases = []
    for path, params, weights, x in b0_blocks(args.block, args.batch):
        with torch.no_grad():
            whole = mb.mbconv(x, params, weights)
        out = torch.empty_like(whole)

        def run_chunk(a, b):
            mb.mbconv(x[a:b], params, weights, out=out[a:b])

        variants = {"whole": lambda: mb.mbconv(x, params, weights, out=out)}
        for c in args.chunks:
            bounds = chunk_bounds(args.batch, c)
            variants[f"{c} chunks, one stream"] = split_run(run_chunk, bounds, streams[:1])
            variants[f"{c} chunks, two streams"] = split_run(run_chunk, bounds, streams)
            variants[f"{c} chunks, two streams, even chunks first"] = split_run(run_chunk, bounds, ranked)
        case = {"path": path, "batch": args.batch, "variants": {}}
        replays = {}
        with torch.no_grad():
            for name, fn in variants.items():
                out.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                exact, err = torch.equal(out, whole), relative_error(out, whole)
                case.setdefault("check", {})[name] = {"bit_for_bit": exact, "relative_error": err}
                if not exact:
                    print(f"SPLIT {path} {name}: not bit for bit the whole batch's output (relative error {err:.2e})",
                          flush=True)
                if not err <= 1e-3:
                    raise SystemExit(f"{path} {name}: the output differs from the whole batch's ({err:.2e})")
                replay = cuda_graph_replay(fn)
                if replay is None:  # recorded, and the other variants still run
                    case["check"][name]["capture"] = "failed: not timed"
                    print(f"SPLIT {path} {name}: could not be captured in a CUDA graph; not timed", flush=True)
                else:
                    replays[name] = replay
            for _ in range(args.runs):
                for name, replay in replays.items():
                    case["variants"].setdefault(name, []).append(timer(replay))
        base = [r["median"] * 1e3 for r in case["variants"].get("whole", [])]
        for name, runs in case["variants"].items():
            med = [r["median"] * 1e3 for r in runs]
            delta = f"{sum(m - b for m, b in zip(med, base)) / len(med):+.1f}" if base else "?"
            print(f"SPLIT {path} {name}: {' / '.join(f'{m:.1f}' for m in med)} us ({delta} against whole)", flush=True)
        cases.append(case)
        write_blocks_file(args.output, "cuda_kernels.mbconv_split", argv, args.batch, cases, {
            **timer.describe(), "cuda_graphs": "every variant one graph, timed as its replay", "runs": args.runs,
            "check": "each variant's output (poisoned first) against the whole batch's: bit for bit or not, "
                     "relative error (past 1e-3 stops the run)"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
