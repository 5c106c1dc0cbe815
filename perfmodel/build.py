"""Build models without allocating their weights."""
from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def meta_init():
    """Construct modules with parameters and buffers on the meta device.

    Unlike ``with torch.device("meta")``, plain tensor arithmetic in a constructor (RegNet
    computes its widths with torch ops) still runs on the CPU; only what a module registers
    moves to meta, so initialisers run on meta tensors and cost nothing.
    """
    register_parameter = torch.nn.Module.register_parameter
    register_buffer = torch.nn.Module.register_buffer

    def param(module, name, p):
        if p is not None and p.device.type != "meta":
            p = torch.nn.Parameter(p.to("meta"), requires_grad=p.requires_grad)
        register_parameter(module, name, p)

    def buffer(module, name, b, persistent=True):
        if b is not None and b.device.type != "meta":
            b = b.to("meta")
        register_buffer(module, name, b, persistent)

    torch.nn.Module.register_parameter = param
    torch.nn.Module.register_buffer = buffer
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register_parameter
        torch.nn.Module.register_buffer = register_buffer
