"""Second L2 probe and allocator trace (issue 14, the as-run misses); run by device_l2probe2.sh.

    python examples/measurements/fidelity/l2probe2.py probe          # under ncu (the script)
    python examples/measurements/fidelity/l2probe2.py parse CSV OUT.json MODE
    python examples/measurements/fidelity/l2probe2.py trace OUTDIR MODEL...   # alloc_MODEL.json
    python examples/measurements/fidelity/l2probe2.py summary l2probe2_h200_none.json
    python examples/measurements/fidelity/l2probe2.py replay l2probe2_h200_none.json [RULE...]

``probe`` launches element-wise kernels and four matrix products of known traffic, each in an
NVTX range ``module:p2.<experiment>.<parameters>.<step>.r<repeat>`` (ncu renames the kernels
by it). Every experiment starts from an ``evict`` (a sum over 1 GiB of other data: what is
dirty is written back, the L2 holds only clean lines of that data). Sizes in MiB.

``rw.S``      fill S (write-only), read S (sum), evict: how much of a freshly written tensor
              the next kernel finds in L2 (its DRAM reads), S = 16..64 in 2 MiB steps (the
              cliff between the first probe's 16 and 32); evict's writes: what stayed dirty.
``ip.S``      mul (reads a, writes b, S each: a batch norm) then relu_ on b in place, evict:
              the pattern of ResNet's and MobileNetV2's misses, S = 16..64 in 4 MiB steps.
``wbr.A.X``   fill A, then read X of other clean data, evict: how many of A's dirty bytes a
              clean read stream of X pushes out (the read's DRAM writes), A in 8/16/24/32,
              X in 8..96: the write-back timing (which kernel pays for a dirty line).
``wbw.A.X``   fill A, then fill X elsewhere (new dirty data), evict: the same against a
              write stream (how the dirty cap behaves, which dirty bytes go first).
``mm.NAME``   a cuBLAS fp16 matrix product of ResNet-50's / ViT's shapes, then a read of its
              output, evict: what a GEMM leaves of its output dirty and readable (does it
              interleave like an element-wise kernel).

``trace`` runs one eager forward of a model (batch 128, float16, channels-last, three warm-up
forwards as perfmodel.ncu's worker) and records every aten op with its module path and the
address and size of each CUDA tensor argument and result (a TorchDispatchMode), plus the
caching allocator's alloc/free events (torch.cuda.memory._record_memory_history) and
segments: which buffers eager reuses, for the l2 model's ``allocator`` rule.
"""
from __future__ import annotations

import json
import os
import sys

MIB = 1 << 20
REPEATS = int(os.environ.get("P2_REPEATS", "2"))
RW_MIB = list(range(16, 65, 2))
IP_MIB = list(range(16, 65, 4))
WBR = [(a, x) for a in (8, 16, 24, 32) for x in (8, 16, 24, 32, 48, 64, 96)]
WBW = [(a, x) for a in (8, 16, 24) for x in (4, 8, 16, 24, 32, 48)]
# (name, M, K, N): ResNet-50 layer4 conv3 (25.7 MB out), layer3 conv3 (51.4 MB out), layer3
# conv1 (51.4 MB in, 12.8 MB out), ViT-B/16 fc2 (K = 3072)
MM = [("r50l4c3", 6272, 512, 2048), ("r50l3c3", 25088, 256, 1024),
      ("r50l3c1", 25088, 1024, 256), ("vitfc2", 25216, 3072, 768)]


def probe() -> None:
    import torch

    h = torch.float16
    big = torch.ones(1024 * MIB // 2, dtype=h, device="cuda")
    other = torch.ones(128 * MIB // 2, dtype=h, device="cuda")
    a = torch.rand(64 * MIB // 2, device="cuda").to(h)
    b = torch.empty(64 * MIB // 2, dtype=h, device="cuda")
    c = torch.empty(64 * MIB // 2, dtype=h, device="cuda")
    mats = {name: (torch.randn(m, k, device="cuda", dtype=h), torch.randn(k, n, device="cuda", dtype=h),
                   torch.empty(m, n, device="cuda", dtype=h)) for name, m, k, n in MM}

    def el(mib):
        return mib * MIB // 2

    steps = []  # (name, fn)
    for r in range(REPEATS):
        t = f"r{r}"
        steps.append((f"p2.start.{t}.evict", lambda: big.sum()))
        for s in RW_MIB:
            steps += [(f"p2.rw.{s}.fill.{t}", lambda s=s: b[:el(s)].fill_(1.0)),
                      (f"p2.rw.{s}.read.{t}", lambda s=s: b[:el(s)].sum()),
                      (f"p2.rw.{s}.evict.{t}", lambda: big.sum())]
        for s in IP_MIB:
            steps += [(f"p2.ip.{s}.mul.{t}", lambda s=s: torch.mul(a[:el(s)], 2, out=b[:el(s)])),
                      (f"p2.ip.{s}.relu.{t}", lambda s=s: b[:el(s)].relu_()),
                      (f"p2.ip.{s}.evict.{t}", lambda: big.sum())]
        for x, y in WBR:
            steps += [(f"p2.wbr.{x}.{y}.fill.{t}", lambda x=x: b[:el(x)].fill_(1.0)),
                      (f"p2.wbr.{x}.{y}.read.{t}", lambda y=y: other[:el(y)].sum()),
                      (f"p2.wbr.{x}.{y}.evict.{t}", lambda: big.sum())]
        for x, y in WBW:
            steps += [(f"p2.wbw.{x}.{y}.fill.{t}", lambda x=x: b[:el(x)].fill_(1.0)),
                      (f"p2.wbw.{x}.{y}.fill2.{t}", lambda y=y: c[:el(y)].fill_(2.0)),
                      (f"p2.wbw.{x}.{y}.evict.{t}", lambda: big.sum())]
        for name, *_ in MM:
            x, w, o = mats[name]
            steps += [(f"p2.mm.{name}.mm.{t}", lambda x=x, w=w, o=o: torch.mm(x, w, out=o)),
                      (f"p2.mm.{name}.read.{t}", lambda o=o: o.sum()),
                      (f"p2.mm.{name}.evict.{t}", lambda: big.sum())]
    for _, fn in steps[:40]:  # warm up (cuBLAS handles, reduction kernels), unprofiled
        fn()
    for name, *_ in MM:
        mats[name][2].copy_(torch.mm(mats[name][0], mats[name][1]))
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for name, fn in steps:
        torch.cuda.nvtx.range_push("module:" + name)
        fn()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def parse(csv_path: str, out_path: str, mode: str) -> None:
    from pathlib import Path

    from perfmodel.ncu import parse_csv

    rows = parse_csv(Path(csv_path).read_text())
    Path(out_path).write_text(json.dumps({
        "command": f"bash examples/measurements/fidelity/device_l2probe2.sh OUT (cache-control {mode})",
        "cache_control": mode, "repeats": REPEATS, "rw_mib": RW_MIB, "ip_mib": IP_MIB,
        "wbr": WBR, "wbw": WBW, "mm": MM,
        "method": f"ncu --clock-control none --cache-control {mode}, metrics dram__bytes_read.sum, "
                  "dram__bytes_write.sum, gpu__time_duration.sum; kernels renamed by NVTX range",
        "rows": rows}, indent=0) + "\n")


def summary(path: str) -> None:
    """Print the probe's rows as tables, MiB, mean over the repeats (a step that ran as
    several kernels is summed): per experiment and parameter, each step's DRAM read / write."""
    from collections import defaultdict

    data = json.load(open(path))
    steps: dict = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
    repeats: dict = defaultdict(set)
    for row in data["rows"]:
        parts = row["module"].split(".")
        if len(parts) < 4 or parts[0] != "p2" or parts[1] == "start":
            continue
        key, step, rep = ".".join(parts[1:-2]), parts[-2], parts[-1]
        steps[key][step][0] += row["dram_read_bytes"] / MIB
        steps[key][step][1] += row["dram_write_bytes"] / MIB
        repeats[key].add(rep)
    print(f"{data['cache_control']}: MiB read / written per step, mean of the repeats")
    for key, by_step in steps.items():
        n = len(repeats[key])
        print(f"{key:16s}", "  ".join(f"{step} {r / n:7.2f} / {w / n:6.2f}"
                                     for step, (r, w) in by_step.items()))


def probe_kernels(data):
    """The probe's steps as plan kernels at the probe's buffers (perfmodel.l2model's
    dram_traffic replays them): one kernel per step of the file's rows (a step that ran as
    several kernels is one), value ids per (buffer, MiB) slice, every slice placed at its
    buffer's address; the ``relu`` step writes in place (op ``relu_``), ``read`` and ``evict``
    write a 2-byte sum. Returns (kernels, addresses, step names)."""
    from types import MappingProxyType

    from perfmodel.plan import Kernel

    sizes = {"big": 1024, "other": 128, "a": 64, "b": 64, "c": 64}
    for name, m, k, n in data["mm"]:
        sizes |= {f"{name}.x": m * k * 2 / MIB, f"{name}.w": k * n * 2 / MIB, f"{name}.o": m * n * 2 / MIB}
    base, at = {}, 1 << 44  # clear of the l2 model's allocator, which places the sums from 1 << 40
    for buf, mib in sizes.items():
        base[buf] = at
        at += -(-int(mib * MIB) // (2 * MIB)) * 2 * MIB + 2 * MIB
    vids, addresses = {}, {}

    def v(buf, mib=None):
        nbytes = int((sizes[buf] if mib is None else mib) * MIB)
        key = (buf, nbytes)
        if key not in vids:
            vids[key] = len(vids) + 1
            addresses[vids[key]] = base[buf]
        return vids[key], nbytes

    def kernel(name, reads=(), writes=(), ops=("op",)):
        reads, writes = dict(reads), dict(writes)
        return Kernel(name, ops=ops, input_bytes=sum(reads.values()), output_bytes=sum(writes.values()),
                      reads=MappingProxyType(reads), writes=MappingProxyType(writes))

    scalars = iter(range(10**6, 10**7))
    kernels, names = [], []
    for row in data["rows"]:
        name = row["module"]
        if names and names[-1] == name:
            continue
        parts = name.split(".")
        exp, step = parts[1], parts[-2]
        if "evict" in (step, parts[-1]):
            k = kernel(name, [v("big")], [(next(scalars), 2)])
        elif exp in ("rw", "ip"):
            s = int(parts[2])
            k = {"fill": lambda: kernel(name, (), [v("b", s)]),
                 "read": lambda: kernel(name, [v("b", s)], [(next(scalars), 2)]),
                 "mul": lambda: kernel(name, [v("a", s)], [v("b", s)]),
                 "relu": lambda: kernel(name, [v("b", s)], [v("b", s)], ("relu_",))}[step]()
        elif exp in ("wbr", "wbw"):
            x, y = int(parts[2]), int(parts[3])
            k = {"fill": lambda: kernel(name, (), [v("b", x)]),
                 "read": lambda: kernel(name, [v("other", y)], [(next(scalars), 2)]),
                 "fill2": lambda: kernel(name, (), [v("c", y)])}[step]()
        elif exp == "mm":
            mm = parts[2]
            k = (kernel(name, [v(f"{mm}.x"), v(f"{mm}.w")], [v(f"{mm}.o")]) if step == "mm"
                 else kernel(name, [v(f"{mm}.o")], [(next(scalars), 2)]))
        else:
            raise ValueError(f"unknown probe step {name!r}")
        kernels.append(k)
        names.append(name)
    return kernels, addresses, names


def replay(path: str, *off: str) -> None:
    """The probe's steps through the l2 byte model (H200's parameters, all rules on but
    `off`) beside the measurement: per experiment, each step's DRAM read / write in MiB,
    measured -> model, mean of the repeats."""
    from collections import defaultdict

    from perfmodel.hardware import load_hardware
    from perfmodel.l2model import Rules, dram_traffic

    data = json.load(open(path))
    hw = load_hardware("h200-sxm")
    kernels, addresses, names = probe_kernels(data)
    rules = Rules.without(off)
    model = dram_traffic(kernels, int(hw.l2_resident_mib * MIB), flushed=data["cache_control"] == "all",
                         keep=frozenset(addresses), dirty_bytes=int(hw.l2_dirty_mib * MIB),
                         ways=hw.l2_ways, rules=rules, passes=1, addresses=addresses)
    measured = defaultdict(lambda: [0, 0])
    for row in data["rows"]:
        measured[row["module"]][0] += row["dram_read_bytes"]
        measured[row["module"]][1] += row["dram_write_bytes"]
    steps: dict = defaultdict(lambda: defaultdict(lambda: [0.0] * 4))
    repeats: dict = defaultdict(set)
    for name, t in zip(names, model):
        parts = name.split(".")
        if parts[1] == "start":
            continue
        key, step, rep = ".".join(parts[1:-2]), parts[-2], parts[-1]
        cell = steps[key][step]
        for i, b in enumerate((*measured[name], t.read_bytes, t.write_bytes)):
            cell[i] += b / MIB
        repeats[key].add(rep)
    print(f"{data['cache_control']}: MiB read / written per step, measured -> model "
          f"(rules off: {', '.join(rules.off) or 'none'}), mean of the repeats")
    for key, by_step in steps.items():
        n = len(repeats[key])
        print(f"{key:11s}", "  ".join(f"{step} {mr / n:5.1f}/{mw / n:4.1f} -> {pr / n:5.1f}/{pw / n:4.1f}"
                                      for step, (mr, mw, pr, pw) in by_step.items()))


def trace(model_name: str, out_path: str) -> None:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    from perfmodel.harness import build_cuda_model, environment, example_input
    from perfmodel.spec import load_spec

    spec = load_spec(model_name).with_overrides(batch=128, dtype="float16")
    torch.backends.cudnn.benchmark = True
    model = build_cuda_model(spec)
    x = [example_input(meta) for meta in spec.input_metas]
    names = {id(m): n for n, m in model.named_modules()}
    stack: list[str] = []
    ops: list = []

    def cuda_tensors(tree):
        out = []
        for t in tree_flatten(tree)[0]:
            if isinstance(t, torch.Tensor) and t.is_cuda:
                s = t.untyped_storage()
                out.append([t.data_ptr(), t.numel() * t.element_size(), s.data_ptr(), s.nbytes()])
        return out

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            ins = cuda_tensors((args, kwargs))
            result = func(*args, **kwargs)
            ops.append([stack[-1] if stack else "", str(func), ins, cuda_tensors(result)])
            return result

    with torch.inference_mode():
        for _ in range(3):  # as perfmodel.ncu._worker: cuDNN autotuning, the allocator settles
            model(*x)
        torch.cuda.synchronize()
        def push(module, _inputs):  # hooks must return None, or they replace values
            stack.append(names[id(module)])

        def pop(_module, _inputs, _output):
            stack.pop()

        for m in model.modules():
            m.register_forward_pre_hook(push)
            m.register_forward_hook(pop)
        history = True
        try:
            torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                     max_entries=100000)
        except Exception as e:  # noqa: BLE001 (keep the op log if the API differs)
            history = f"not recorded: {e}"
        with Log():
            model(*x)
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot() if history is True else {}
        if history is True:
            torch.cuda.memory._record_memory_history(enabled=None)
    events = [[e.get("action"), e.get("addr"), e.get("size")]
              for trace_ in snap.get("device_traces", []) for e in trace_]
    segments = [[s["address"], s["total_size"], s.get("segment_type", ""),
                 [[blk["size"], blk["state"]] for blk in s["blocks"]]]
                for s in snap.get("segments", [])]
    with open(out_path, "w") as f:
        json.dump({"model": model_name, "batch": 128, "dtype": "float16",
                   "memory_format": "channels_last", "environment": environment(),
                   "method": "three warm-up forwards in inference_mode, then one logged forward; "
                             "ops: [module, aten op, inputs, outputs], each tensor "
                             "[data_ptr, bytes, storage data_ptr, storage bytes]; events: "
                             "caching-allocator [action, addr, size] of the logged forward; "
                             "segments: [address, total_size, type, [[block size, state]]] after it",
                   "history": history, "ops": ops, "events": events, "segments": segments}, f)
        f.write("\n")


if __name__ == "__main__":
    if sys.argv[1] == "probe":
        probe()
    elif sys.argv[1] == "parse":
        parse(*sys.argv[2:5])
    elif sys.argv[1] == "summary":
        summary(sys.argv[2])
    elif sys.argv[1] == "replay":
        replay(*sys.argv[2:])
    elif sys.argv[1] == "trace":  # device_l2probe2.sh runs one model per process, as ncu's worker
        for name in sys.argv[3:]:
            trace(name, f"{sys.argv[2]}/alloc_{name}.json")
            print("traced", name, flush=True)
    else:
        raise SystemExit(f"unknown command {sys.argv[1]!r} (probe, parse, summary, replay, trace)")
