"""Calibration files: what microbenchmarks measured on one GPU, for the latency estimate.

A calibration file (YAML, ``configs/hardware/calibration/NAME.yaml``, named by the hardware
config's optional ``calibration`` field) holds, per table, the time one library or compiler
kernel took at each shape of a grid, and the per-kernel overheads of launching. Each row of a
table is its features (shape numbers, named by ``features``), the matrix ops and the DRAM
bytes of the call counted as the plans count them (eq. 22 and the compulsory loads of eq. 23),
and the measured time per call in microseconds. Derived numbers (efficiencies) are computed
against a hardware config when the file is used, never stored.

Times are CUDA-graph replays of many calls back to back, so a row's time includes the device's
gap between kernels but not the host's launch cost; ``launch`` records the rest:
``graph_kernel_us`` (a tiny kernel replayed in a graph), ``stream_kernel_us`` (the same on a
busy stream, as a model runs without graphs) and ``eager_issue_us`` (host time per eager op).

Loading validates every field and fails with the file, the field and the reason.
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

import yaml

from .errors import InputError
from .outputs import write_text
from .yamlio import Fields, load_mapping

SCHEMA = "perfmodel.calibration/1"
_FIELDS = {"schema", "hardware", "command", "environment", "method", "dtype", "launch",
           "tables", "notes"}
_TABLE_FIELDS = {"features", "kernels_per_call", "rows", "notes"}
LAUNCH_KEYS = ("graph_kernel_us", "stream_kernel_us", "eager_issue_us")
# optional: host time per eager library call (cuDNN, cuBLAS; default eager_issue_us) and per
# kernel of Inductor's generated code (default 0: no host floor for compiled models)
OPTIONAL_LAUNCH_KEYS = ("eager_library_issue_us", "compiled_issue_us")
TAIL = ("flops", "dram_bytes", "us")  # the last three numbers of every row


@dataclass(frozen=True)
class Table:
    """Measured calls of one kernel kind: rows of features, flops, DRAM bytes and time."""

    name: str
    features: tuple[str, ...]
    rows: tuple[tuple[float, ...], ...]
    kernels_per_call: int = 1  # plan kernels one call stands for (eager batchnorm: 3)

    def feature_values(self, row: tuple[float, ...]) -> tuple[float, ...]:
        return row[:len(self.features)]


@dataclass(frozen=True)
class Calibration:
    dtype: str
    launch: Mapping[str, float]
    tables: Mapping[str, Table]
    hardware: str = ""
    command: str = ""
    environment: Mapping = field(default_factory=dict)
    method: Mapping = field(default_factory=dict)
    path: str | None = None

    @property
    def graph_kernel_us(self) -> float:
        return self.launch["graph_kernel_us"]

    @property
    def stream_extra_us(self) -> float:
        """What a kernel launched on a stream pays over one replayed in a CUDA graph."""
        return max(0.0, self.launch["stream_kernel_us"] - self.launch["graph_kernel_us"])

    @property
    def eager_issue_us(self) -> float:
        return self.launch["eager_issue_us"]

    @property
    def eager_library_issue_us(self) -> float:
        return self.launch.get("eager_library_issue_us", self.eager_issue_us)

    @property
    def compiled_issue_us(self) -> float:
        return self.launch.get("compiled_issue_us", 0.0)


def _positive(value, f: Fields, where: str, zero_ok: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or (value == 0 and not zero_ok):
        raise f.error(where, f"must be a {'non-negative' if zero_ok else 'positive'} number, "
                      f"got {value!r}")
    return float(value)


def _table(name: str, data, f: Fields) -> Table:
    if not isinstance(data, dict):
        raise f.error(f"tables.{name}", f"expected a mapping, got {data!r}")
    unknown = sorted(set(data) - _TABLE_FIELDS)
    if unknown:
        raise f.error(f"tables.{name}.{unknown[0]}",
                      f"unknown field (allowed: {', '.join(sorted(_TABLE_FIELDS))})")
    features = data.get("features")
    if not isinstance(features, list) or not all(isinstance(x, str) for x in features):
        raise f.error(f"tables.{name}.features", f"expected a list of names, got {features!r}")
    per_call = data.get("kernels_per_call", 1)
    if isinstance(per_call, bool) or not isinstance(per_call, int) or per_call < 1:
        raise f.error(f"tables.{name}.kernels_per_call",
                      f"must be a positive integer, got {per_call!r}")
    rows = data.get("rows")
    if not isinstance(rows, list) or not rows:
        raise f.error(f"tables.{name}.rows", "expected a non-empty list of rows")
    width = len(features) + len(TAIL)
    out = []
    for i, row in enumerate(rows):
        where = f"tables.{name}.rows[{i}]"
        if not isinstance(row, list) or len(row) != width:
            raise f.error(where, f"expected {width} numbers ({', '.join(features + list(TAIL))})"
                          f", got {row!r}")
        values = [_positive(v, f, where, zero_ok=j < width - 1) for j, v in enumerate(row)]
        out.append(tuple(values))
    return Table(name, tuple(features), tuple(out), per_call)


def parse_calibration(data: dict, file: str) -> Calibration:
    f = Fields(data, file, _FIELDS)
    schema = f.get("schema", types=str)
    if schema != SCHEMA:
        raise f.error("schema", f"expected {SCHEMA!r}, got {schema!r}")
    launch = f.get("launch", types=dict)
    for key in LAUNCH_KEYS:
        if key not in launch:
            raise f.error(f"launch.{key}", "missing (required)")
    for key, value in launch.items():
        if key not in LAUNCH_KEYS + OPTIONAL_LAUNCH_KEYS:
            raise f.error(f"launch.{key}", "unknown field (allowed: "
                          f"{', '.join(LAUNCH_KEYS + OPTIONAL_LAUNCH_KEYS)})")
        _positive(value, f, f"launch.{key}")
    tables = f.get("tables", types=dict)
    if not tables:
        raise f.error("tables", "needs at least one table")
    return Calibration(
        dtype=f.get("dtype", "float16", str),
        launch=MappingProxyType({k: float(v) for k, v in launch.items()}),
        tables=MappingProxyType({name: _table(name, t, f) for name, t in tables.items()}),
        hardware=f.get("hardware", "", str), command=f.get("command", "", str),
        environment=MappingProxyType(f.get("environment", {}, dict)),
        method=MappingProxyType(f.get("method", {}, dict)), path=file)


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, mtime: float) -> Calibration:
    return parse_calibration(load_mapping(Path(path)), path)


def load_calibration(path: str | Path) -> Calibration:
    """Read and validate a calibration file (cached while the file is unchanged)."""
    path = Path(path)
    if not path.is_file():
        raise InputError("file not found", file=str(path))
    return _load_cached(str(path), path.stat().st_mtime)


def dump_calibration(doc: dict, path: str | Path) -> Path:
    """Write a calibration document: one table row per line, so that a diff reads well."""
    path = Path(path)
    # plain types only (torch.__version__ is a str subclass that YAML cannot represent)
    head = json.loads(json.dumps({k: v for k, v in doc.items() if k != "tables"}, default=str))
    lines = [yaml.safe_dump(head, sort_keys=False, width=100).rstrip(), "tables:"]
    for name, table in doc.get("tables", {}).items():
        lines.append(f"  {name}:")
        lines.append(f"    features: [{', '.join(table['features'])}]")
        lines.append(f"    kernels_per_call: {table.get('kernels_per_call', 1)}")
        if table.get("notes"):
            lines.append(f"    notes: {yaml.safe_dump(table['notes'], width=10**6).strip()}")
        lines.append(f"    rows:  # {', '.join(list(table['features']) + list(TAIL))}")
        for row in table["rows"]:
            lines.append("    - [" + ", ".join(_number(v) for v in row) + "]")
    return write_text(path, "\n".join(lines) + "\n")


def _number(v: float) -> str:
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.4g}"
