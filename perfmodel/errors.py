"""Errors the command line turns into exit codes: bad input is 2, a failed analysis is 1."""
from __future__ import annotations


class PerfmodelError(Exception):
    """Base class; `exit_code` is what the CLI returns."""

    exit_code = 1


class InputError(PerfmodelError):
    """Bad input: a file, field or value the user can fix. Exit code 2.

    The message reads ``FILE: field 'FIELD': REASON`` so that one line says what to fix.
    """

    exit_code = 2

    def __init__(self, reason: str, *, file: str | None = None, field: str | None = None):
        self.reason, self.file, self.field = reason, file, field
        parts = []
        if file:
            parts.append(str(file))
        if field:
            parts.append(f"field '{field}'")
        super().__init__(": ".join(parts + [reason]))


class TraceError(InputError):
    """The model could not be traced; the message names the op or module that failed."""


class AnalysisError(PerfmodelError):
    """The analysis itself failed (e.g. unsupported ops under --strict). Exit code 1."""
