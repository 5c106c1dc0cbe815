"""Where the built-in configs live, in a checkout and after `pip install .`."""
from __future__ import annotations

from pathlib import Path


def builtin_dir(kind: str) -> Path:
    """Folder of built-in YAML configs of `kind` ('hardware' or 'models')."""
    try:  # installed: configs/ is packaged as perfmodel.configs
        from importlib.resources import files

        path = Path(str(files("perfmodel.configs") / kind))
        if path.is_dir():
            return path
    except ModuleNotFoundError:
        pass
    return Path(__file__).resolve().parent.parent / "configs" / kind


def builtin_names(kind: str) -> list[str]:
    return sorted(p.stem for p in builtin_dir(kind).glob("*.yaml"))


def resolve_config(name_or_path: str | Path, kind: str) -> Path | None:
    """A path that exists, or the built-in config of that name; None if neither."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path if path.is_file() else None
    candidate = builtin_dir(kind) / f"{name_or_path}.yaml"
    return candidate if candidate.is_file() else None
