"""Reading YAML mappings with errors that name the file, the field and the reason."""
from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import Any

import yaml

from .errors import InputError

_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where built in


def load_mapping(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise InputError("file not found", file=str(path))
    try:
        data = yaml.load(path.read_text(), Loader=_SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise InputError(f"not valid YAML{where}: {getattr(exc, 'problem', exc)}", file=str(path))
    if not isinstance(data, dict):
        raise InputError("expected a YAML mapping of fields", file=str(path))
    return data


class Fields:
    """Typed access to a YAML mapping that reports unknown, missing and mistyped fields."""

    def __init__(self, data: dict[str, Any], file: str, allowed: set[str]):
        self.data, self.file = data, file
        unknown = sorted(set(data) - allowed, key=str)
        if unknown:
            close = difflib.get_close_matches(str(unknown[0]), sorted(allowed), n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise InputError(f"unknown field ({hint}allowed: {', '.join(sorted(allowed))})",
                             file=file, field=unknown[0])

    def error(self, field: str, reason: str) -> InputError:
        return InputError(reason, file=self.file, field=field)

    def get(self, field: str, default: Any = ..., types: type | tuple = object) -> Any:
        if field not in self.data or self.data[field] is None:
            if default is ...:
                raise self.error(field, "missing (required)")
            return default
        value = self.data[field]
        if not isinstance(value, types) or isinstance(value, bool) and bool not in _tuple(types):
            raise self.error(field, f"expected {type_names(types)}, got {value!r}")
        return value

    def positive(self, field: str, default: Any = ..., *, integer: bool = False) -> Any:
        value = self.get(field, default, (int,) if integer else (int, float))
        if value is default and default is not ...:
            return value
        if not math.isfinite(value) or value <= 0:
            raise self.error(field, f"must be a positive number, got {value}")
        return value


def _tuple(types: type | tuple) -> tuple:
    return types if isinstance(types, tuple) else (types,)


_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
          dict: "a mapping", list: "a list"}


def type_names(types: type | tuple) -> str:
    """What a YAML or JSON user reads for Python types: (int, float) is 'a number'."""
    kinds = [t for t in _tuple(types) if not (t is int and float in _tuple(types))]
    return " or ".join(_NAMES.get(t, t.__name__) for t in kinds)
