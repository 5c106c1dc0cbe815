"""Data types and their sizes.

Conventions used throughout perfmodel: bytes are elements x dtype size; one
multiply-accumulate (MAC) is two ops. Dtype names are torch's (``float16``, ``bfloat16``,
``float32``, ``float8_e4m3fn`` ...); short aliases (``fp16``, ``half``, ``bf16``) are accepted.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import InputError

if TYPE_CHECKING:
    import torch

# Names, not torch dtypes, so that parsing a dtype (a spec, a hardware config, an option)
# does not import torch; `DType.torch` looks the torch dtype up when a stage needs it.
DTYPE_NAMES = ("float16", "bfloat16", "float32", "float8_e4m3fn", "float8_e5m2", "int8")
ALIASES = {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32",
           "float": "float32", "fp8": "float8_e4m3fn", "float8": "float8_e4m3fn"}

# Dtypes an input may have besides the analysis dtype (token ids, masks).
INPUT_DTYPE_NAMES = ("int64", "int32", "bool")


def _torch_dtypes(names) -> "dict[str, torch.dtype]":
    import torch

    return {name: getattr(torch, name) for name in names}


def __getattr__(name: str):
    """DTYPES and INPUT_DTYPES (name -> torch dtype), made when first used."""
    if name in ("DTYPES", "INPUT_DTYPES"):
        table = _torch_dtypes(DTYPE_NAMES if name == "DTYPES" else INPUT_DTYPE_NAMES)
        globals()[name] = table
        return table
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Hardware peak tables are keyed by these (tf32 is the tensor-core mode for float32 inputs).
PEAK_KEYS = ("float16", "bfloat16", "float32", "tf32", "float8", "int8")


class DType(str):
    """A parsed analysis dtype. It is its canonical torch name (so it prints, compares and
    serialises as ``float16``) and carries what the stages need without parsing again."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return str(self)

    @property
    def torch(self) -> "torch.dtype":
        import torch

        return getattr(torch, self)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.torch.itemsize

    @property
    def peak_key(self) -> str:
        """The hardware peak-table key that governs arithmetic in this dtype."""
        return "float8" if self.startswith("float8") else self.name


def parse_dtype(name: "str | DType", *, file: str | None = None,
                field: str | None = "dtype") -> DType:
    """The DType a name or alias stands for (a DType is returned as it is), or InputError
    listing the choices."""
    if isinstance(name, DType):
        return name
    key = ALIASES.get(str(name).lower(), str(name).lower())
    if key not in DTYPE_NAMES:
        raise InputError(f"unknown dtype '{name}' (choose from {', '.join(DTYPE_NAMES)})",
                         file=file, field=field)
    return DType(key)


FLOAT16 = DType("float16")  # the default workload's dtype


# For callers that hold a name rather than a DType (measurement files, the GPU harness).
def canonical_dtype(name: str, *, file: str | None = None, field: str | None = "dtype") -> str:
    """Return the canonical torch name of a dtype, or raise InputError listing the choices."""
    return parse_dtype(name, file=file, field=field).name


def torch_dtype(name: "str | DType") -> "torch.dtype":
    return parse_dtype(name).torch
