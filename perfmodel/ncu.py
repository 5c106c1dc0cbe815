"""Measured DRAM bytes per kernel with Nsight Compute, attributed to module paths.

``collect_csv(spec, batch, dtype)`` runs ``python -m perfmodel.ncu SPEC BATCH DTYPE`` under ``ncu`` (clocks left alone,
caches not flushed between kernels, so that what one kernel leaves in L2 for the next is
seen as it is in a real run): the worker warms the model up, then runs one forward pass
inside the profiled range with an NVTX range named after each module, and ncu renames
every kernel by its innermost range. The result is one row per kernel: module path,
DRAM bytes read and written (``dram__bytes_read.sum``, ``dram__bytes_write.sum``) and
duration.
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


def ncu_command(spec: str, batch: int, dtype: str, report: str) -> list[str]:
    return ["ncu", "--nvtx", "--profile-from-start", "off", "--clock-control", "none",
            "--cache-control", "none", "--metrics", ",".join(METRICS), "-f", "-o", report,
            sys.executable, "-m", "perfmodel.ncu", spec, str(batch), dtype]


def collect_csv(spec: str, batch: int, dtype: str) -> str:
    """Run the worker under ncu and return the raw CSV (kernels renamed by module)."""
    if shutil.which("ncu") is None:
        from .errors import InputError

        raise InputError("--ncu needs Nsight Compute's `ncu` on the PATH")
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "kernels")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]))
        subprocess.run(ncu_command(spec, batch, dtype, report), check=True, env=env,
                       stdout=subprocess.DEVNULL)
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


def _worker(spec_name: str, batch: int, dtype: str) -> None:
    """Run under ncu: warm up, then one profiled forward with module NVTX ranges."""
    import torch

    from .harness import build_cuda_model, example_input
    from .spec import load_spec

    spec = load_spec(spec_name).with_overrides(batch=batch, dtype=dtype)
    torch.backends.cudnn.benchmark = True
    model = build_cuda_model(spec)
    x = [example_input(meta) for meta in spec.input_metas]
    names = {id(m): n for n, m in model.named_modules()}
    with torch.inference_mode():
        for _ in range(3):
            model(*x)
        torch.cuda.synchronize()
        def push(module, _inputs):  # hooks must return None, or they replace values
            torch.cuda.nvtx.range_push("module:" + names[id(module)])

        def pop(_module, _inputs, _output):
            torch.cuda.nvtx.range_pop()

        for m in model.modules():
            m.register_forward_pre_hook(push)
            m.register_forward_hook(pop)
        torch.cuda.profiler.start()
        model(*x)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()


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
    else:
        _worker(sys.argv[1], int(sys.argv[2]), sys.argv[3])
