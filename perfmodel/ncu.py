"""Measured DRAM bytes per kernel with Nsight Compute, attributed to module paths.

``collect_csv(spec, batch, dtype)`` runs ``python -m perfmodel.ncu SPEC BATCH DTYPE`` under
``ncu`` with clocks left alone. ``cache_control``: "none" leaves the caches alone, so what one
kernel leaves in L2 for the next is seen as in a real run; "all" flushes them before each
kernel, so reads show the compulsory traffic and a kernel's last writes may still sit in L2
when it ends. The worker warms the model up (compiling it first for ``backend="inductor"``),
then runs one forward pass inside the profiled range. In eager, an NVTX range named after
each module makes ncu rename every kernel by its innermost range; a compiled graph has no
module ranges, so its kernels keep their own names. The result is one row per kernel:
module path, DRAM bytes read and written (``dram__bytes_read.sum``,
``dram__bytes_write.sum``) and duration.

``collect_probe_csv`` profiles a fixed sequence of copies instead of a model (the L2 probe):
what a kernel of known traffic reads and writes as seen by DRAM, the microbenchmark the
byte model's L2 rules are calibrated on.
"""
from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum")
# to bytes and milliseconds
_UNITS = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "ns": 1e-6, "nsecond": 1e-6,
          "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}


CACHE_CONTROLS = ("none", "all")
WORKER_BACKENDS = ("eager", "inductor")


def ncu_command(spec: str, batch: int, dtype: str, report: str, cache_control: str = "none",
                backend: str = "eager", freezing: bool = False) -> list[str]:
    if cache_control not in CACHE_CONTROLS:
        raise ValueError(f"cache_control must be one of {CACHE_CONTROLS}, got {cache_control!r}")
    if backend not in WORKER_BACKENDS:
        raise ValueError(f"the ncu worker runs {WORKER_BACKENDS}, got {backend!r}")
    worker = [spec, str(batch), dtype] + ([backend] if backend != "eager" or freezing else [])
    return _ncu(report, cache_control) + worker + (["freezing"] if freezing else [])


def note(cache_control: str) -> str:
    """The method note a measurement file records for its ncu rows (fidelity.cache_control
    reads the mode back from it)."""
    return (f"ncu --clock-control none --cache-control {cache_control}, one pass, kernels "
            "renamed by module NVTX ranges (eager)")


def _ncu(report: str, cache_control: str) -> list[str]:
    return ["ncu", "--nvtx", "--profile-from-start", "off", "--clock-control", "none",
            "--cache-control", cache_control, "--metrics", ",".join(METRICS), "-f", "-o", report,
            sys.executable, "-m", "perfmodel.ncu"]


def collect_csv(spec: str, batch: int, dtype: str, cache_control: str = "none",
                backend: str = "eager", freezing: bool = False) -> str:
    """Run the worker under ncu and return the raw CSV (eager kernels renamed by module)."""
    return _collect(lambda report: ncu_command(spec, batch, dtype, report, cache_control,
                                               backend, freezing), needed_by="--ncu")


def collect_probe_csv(cache_control: str = "none") -> str:
    """The L2 probe (``_probe``) under ncu: the raw CSV, kernels renamed by probe step."""
    return _collect(lambda report: _ncu(report, cache_control) + ["--probe"],
                    needed_by="l2-probe")


def _collect(command, needed_by: str) -> str:
    """`needed_by` names what the user asked for (an option or a command) in the error."""
    if shutil.which("ncu") is None:
        from .errors import InputError

        raise InputError(f"{needed_by} needs Nsight Compute's `ncu` on the PATH")
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "kernels")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]))
        run = subprocess.run(command(report), env=env, stdout=subprocess.DEVNULL)
        if run.returncode:
            from .errors import AnalysisError

            raise AnalysisError(f"Nsight Compute exited with {run.returncode} (its messages are "
                                f"above): {' '.join(command(report))}")
        text = subprocess.run(["ncu", "--import", report + ".ncu-rep", "--csv", "--page", "raw",
                               "--print-nvtx-rename", "kernel", "--metrics", ",".join(METRICS)],
                              check=True, capture_output=True, text=True).stdout
    return text


def parse_csv(text: str) -> list[dict]:
    """Rows of ``ncu --csv --page raw``: a header, a units row, then one row per kernel."""
    lines = [l for l in text.splitlines() if l.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header, units, data = rows[0], rows[1], rows[2:]
    col = {name: i for i, name in enumerate(header)}
    out = []
    for r in data:
        def value(metric):
            i = col[metric]
            return float(r[i].replace(",", "")) * _UNITS.get(units[i], 1.0)
        # renamed kernels read "module:PATH/KERNEL"; module paths hold no "/"
        renamed = r[col["Kernel Name"]]
        module, _, name = renamed.partition("/") if renamed.startswith("module:") else ("", "", renamed)
        out.append({"module": module[len("module:"):], "name": name,
                    "dram_read_bytes": int(value(METRICS[0])),
                    "dram_write_bytes": int(value(METRICS[1])),
                    "duration_ms": value(METRICS[2])})
    return out


def _worker(spec_name: str, batch: int, dtype: str, backend: str = "eager",
            freezing: bool = False) -> None:
    """Run under ncu: warm up, then one profiled forward (eager: with module NVTX ranges)."""
    import torch

    from .harness import build_cuda_model, compiled_runner, example_input
    from .spec import load_spec

    spec = load_spec(spec_name).with_overrides(batch=batch, dtype=dtype)
    torch.backends.cudnn.benchmark = True
    model = build_cuda_model(spec)
    x = [example_input(meta) for meta in spec.input_metas]
    run = compiled_runner(model, freezing=freezing) if backend == "inductor" else model
    with torch.inference_mode():
        for _ in range(3):  # compiles, autotunes cuDNN, settles the allocator
            run(*x)
        torch.cuda.synchronize()
        if backend == "eager":  # hooks would break a compiled graph; it has no modules anyway
            _name_kernels_by_module(model)
        torch.cuda.profiler.start()
        run(*x)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()


def _name_kernels_by_module(model) -> None:
    import torch

    names = {id(m): n for n, m in model.named_modules()}

    def push(module, _inputs):  # hooks must return None, or they replace values
        torch.cuda.nvtx.range_push("module:" + names[id(module)])

    def pop(_module, _inputs, _output):
        torch.cuda.nvtx.range_pop()

    for m in model.modules():
        m.register_forward_pre_hook(push)
        m.register_forward_hook(pop)


PROBE_MIB = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
PROBE_EVICT_MIB = 1024


def _probe() -> None:
    """Run under ncu: per size S MiB, three kernels named ``module:probe.S.<step>``:
    ``copy`` (b = -a: reads S, writes S; an element-wise kernel, since a plain copy would be a
    cudaMemcpy, which ncu does not profile), ``chain`` (c = -b: reads what ``copy`` just wrote,
    the producer -> consumer hand-off the L2-carry rule credits) and ``evict`` (a sum over
    1 GiB of unrelated data: pushes the last writes out of L2, so DRAM sees them there)."""
    import torch

    big = torch.ones(PROBE_EVICT_MIB << 19, dtype=torch.float16, device="cuda")
    pairs = {s: (torch.rand(s << 19, device="cuda").half(), torch.empty(s << 19, dtype=torch.float16, device="cuda"),
                 torch.empty(s << 19, dtype=torch.float16, device="cuda")) for s in PROBE_MIB}
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for s, (a, b, c) in pairs.items():
        for step, fn in (("copy", lambda: torch.neg(a, out=b)), ("chain", lambda: torch.neg(b, out=c)),
                         ("evict", lambda: big.sum())):
            torch.cuda.nvtx.range_push(f"module:probe.{s}.{step}")
            fn()
            torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def write_probe(path: str | Path, cache_control: str) -> Path:
    """Profile the L2 probe and write its rows (and the raw CSV beside them) to `path`."""
    import json

    from .harness import environment
    from .outputs import prepare_output, write_text

    path = prepare_output(path)  # before the minutes under ncu
    text = collect_probe_csv(cache_control)
    write_text(path.with_suffix(".ncu.csv"), text)
    write_text(path, json.dumps({
        "command": f"perfmodel l2-probe -o {path.name} --cache-control {cache_control}",
        "environment": environment(), "cache_control": cache_control,
        "method": note(cache_control).replace(" (eager)", "") + "; steps per size: copy, chain, evict",
        "sizes_mib": list(PROBE_MIB), "rows": parse_csv(text)}, indent=1) + "\n")
    return path


def reparse(path: str | Path) -> None:
    """Re-derive a measurement file's ``ncu`` rows from the raw CSV kept beside it."""
    import json

    path = Path(path)
    data = json.loads(path.read_text())
    data["results"]["ncu"] = parse_csv(path.with_suffix(".ncu.csv").read_text())
    data["method"]["ncu_rows"] = ("derived from the .ncu.csv beside this file by "
                                  "`python -m perfmodel.ncu --reparse`")
    path.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "--reparse":
        for file in sys.argv[2:]:
            reparse(file)
    elif sys.argv[1] == "--probe":
        _probe()
    elif sys.argv[1] == "--probe-file":  # python -m perfmodel.ncu --probe-file OUT.json MODE
        write_probe(sys.argv[2], sys.argv[3])
    else:
        _worker(sys.argv[1], int(sys.argv[2]), sys.argv[3], *sys.argv[4:5],
                freezing="freezing" in sys.argv[5:])
