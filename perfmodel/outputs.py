"""Files the commands write (tables, measurements, calibrations, figures): a missing folder
is made, and a path that cannot be written is bad input (exit 2) naming the path and the
option it came from, never a traceback."""
from __future__ import annotations

import os
from pathlib import Path

from .errors import InputError


def prepare_output(path: str | Path, field: str | None = "--output") -> Path:
    """Make `path`'s folder if it is missing and check that `path` can be written; call it
    before the work whose result goes there, so that a bad path fails at once."""
    path = Path(path)
    if path.is_dir():
        raise InputError("is a folder, not a file", file=str(path), field=field)
    folder = path.parent
    blocker = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise InputError(f"cannot create the folder {folder}: {blocker} is a file",
                         file=str(path), field=field)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the folder {folder}: {exc.strerror or exc}",
                         file=str(path), field=field) from exc
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InputError("cannot write here (permission denied)", file=str(path), field=field)
    return path


def write_text(path: str | Path, text: str, field: str | None = "--output") -> Path:
    """Write `text` to `path` (its folder made where missing); errors as `prepare_output`."""
    path = prepare_output(path, field)
    try:
        path.write_text(text)
    except OSError as exc:
        raise InputError(f"cannot write the file: {exc.strerror or exc}", file=str(path),
                         field=field) from exc
    return path
