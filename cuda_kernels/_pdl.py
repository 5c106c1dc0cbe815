"""Programmatic dependent launch switch (``CUDA_KERNELS_PDL``; default on).

With it on, the fused kernels (the wgmma ConvFirst kernel and its persistent variant 3, the stride-2
kernels, the mma.sync ConvFirst / FFN kernel, the fused stem) are launched with
``cudaLaunchAttributeProgrammaticStreamSerialization``: each kernel's blocks may start while the previous
kernel in the stream drains, run what does not depend on it (barrier setup, weight prefetch into shared
memory) and wait (``griddepcontrol.wait``) before reading activations or writing global memory
(``csrc/pdl.h``). The variable is read at every launch, on the host, and passed to the launchers as a
flag, so one build serves both settings; under CUDA-graph capture the setting at capture time is kept.
"""

from __future__ import annotations

import os

from cuda_kernels import _switches

SWITCH = "CUDA_KERNELS_PDL"


# On unless switched off: on the H200 every chain of fused kernels came out bit-identical with it on and off
# (tests/test_pdl.py, eager and CUDA graphs) and ConvFirstNet-H200 ran 25 us faster end to end (session 7,
# examples/measurements/pdl/).
DEFAULT = True


def parse(value: str | None) -> bool:
    """The switch's value: unset -> `DEFAULT` (on); empty, ``0``/``off``/``false``/``no``/``none`` -> False;
    ``1``/``on``/``true``/``yes`` -> True (case-insensitive); anything else raises ValueError."""
    return _switches.parse(SWITCH, value, DEFAULT)


def enabled() -> bool:
    """Whether launches now use programmatic dependent launch (reads ``CUDA_KERNELS_PDL``)."""
    return parse(os.environ.get(SWITCH))
