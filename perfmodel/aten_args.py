"""Walk an aten op's arguments and outputs: the tensors in them, and the same structure with
each tensor mapped (to its shape and dtype, in the trace).

aten passes plain tuples, lists and dicts of tensors and scalars; they are walked directly,
which is several times faster than torch's general pytree (a traced forward calls these
thousands of times). Any other container (a named tuple of results, a registered pytree
class) goes through torch.utils._pytree, so the result is the same as tree_flatten's.
"""
from __future__ import annotations

import torch
from torch.utils._pytree import tree_flatten, tree_map

_SCALARS = frozenset({int, float, bool, complex, str, type(None), torch.dtype, torch.device,
                      torch.memory_format, torch.layout})


def tensors_in(tree) -> list[torch.Tensor]:
    """The tensors in `tree`, in tree_flatten's order."""
    found: list[torch.Tensor] = []
    _collect(tree, found)
    return found


def _collect(x, found: list) -> None:
    kind = type(x)
    if kind is tuple or kind is list:
        for item in x:
            _collect(item, found)
    elif kind is dict:
        for item in x.values():
            _collect(item, found)
    elif kind in _SCALARS:
        return
    elif isinstance(x, torch.Tensor):
        found.append(x)
    else:
        found += [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


def map_tensors(x, fn):
    """`x` with every tensor t replaced by fn(t) (tree_map's result)."""
    kind = type(x)
    if kind is tuple or kind is list:
        return kind([map_tensors(item, fn) for item in x])
    if kind is dict:
        return {key: map_tensors(item, fn) for key, item in x.items()}
    if kind in _SCALARS:
        return x
    if isinstance(x, torch.Tensor):
        return fn(x)
    return tree_map(lambda a: fn(a) if isinstance(a, torch.Tensor) else a, x)
