"""On/off switches read from the environment (``CUDA_KERNELS_*``), one parser for all of them.

Unset: the switch's default. ``1``/``on``/``true``/``yes`` -> on; empty, ``0``/``off``/``false``/``no``/``none``
-> off (case-insensitive, surrounding spaces ignored); anything else is a ValueError naming the variable, so a
typo never silently picks a kernel.
"""

from __future__ import annotations

import os

ON = ("1", "on", "true", "yes")
OFF = ("", "0", "off", "false", "no", "none")


def parse(name: str, value: str | None, default: bool) -> bool:
    """`value` of switch `name` (None: unset -> `default`)."""
    if value is None:
        return default
    text = value.strip().lower()
    if text in OFF:
        return False
    if text in ON:
        return True
    raise ValueError(f"{name}={value!r}: expected 0 or 1 (off / on)")


def flag(name: str, default: bool) -> bool:
    """Switch `name` as the environment sets it now (read at every call)."""
    return parse(name, os.environ.get(name), default)
