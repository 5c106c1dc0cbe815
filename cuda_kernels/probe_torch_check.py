"""Probe for the raw op's crash in the first C = 512 device call: the process died with a
segmentation fault at the first bad-input check whose message is formatted (``TORCH_CHECK(cond,
"hidden ", hidden, " is not a multiple of ", kHiddenChunk)``), after two checks with plain string
messages had raised as expected. This builds a C++-only extension with the same toolchain and
headers as the kernels' bindings (csrc/checks.h included) and throws each kind of message in its
own process, so that the log says which kinds crash on that machine (there, in the call of
examples/measurements/convfirst_c256/, kinds 1, 2 and 4: every message that streams a number; the
bindings now format numbers with checks::num, kind 5, not yet run there):

    python3 cuda_kernels/probe_torch_check.py

It needs no GPU; on this repository's CPU machine every kind raises.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CSRC = Path(__file__).resolve().parent / "csrc"
SOURCE = r"""
#include <torch/extension.h>
#include "checks.h"

namespace probe {
constexpr int kChunk = 128;
}

// kind 0: literal message; 1: formatted with an int64 and a namespace-scope constexpr int (the
// crashing check); 2: formatted with an int64 only; 3: a checks.h message (name + literal);
// 4: std::string built by c10::str, thrown through TORCH_CHECK(false, s); 5: the bindings' form
// since, numbers as strings (checks::num).
int64_t check(torch::Tensor b, int64_t kind) {
  const int64_t n = b.numel();
  switch (kind) {
    case 0: TORCH_CHECK(n % probe::kChunk == 0, "literal only"); break;
    case 1: TORCH_CHECK(n % probe::kChunk == 0, "hidden ", n, " is not a multiple of ", probe::kChunk); break;
    case 2: TORCH_CHECK(n % probe::kChunk == 0, "hidden ", n, " is not a multiple of 128"); break;
    case 3: checks::dense(b, "b1", torch::kHalf); break;
    case 4: {
      const std::string message = c10::str("hidden ", n);
      TORCH_CHECK(false, message);
    }
    case 5:
      TORCH_CHECK(n % probe::kChunk == 0, "hidden ", checks::num(n), " is not a multiple of ", checks::num(probe::kChunk));
  }
  return n;
}
"""
KINDS = ("literal", "int64 + constexpr int", "int64", "checks.h name", "c10::str string", "checks::num strings")


def load():
    from torch.utils.cpp_extension import load_inline

    return load_inline("perfmodel_probe_torch_check", cpp_sources=[SOURCE], functions=["check"],
                       extra_cflags=["-O3"], extra_include_paths=[str(CSRC)])


def main() -> int:
    if len(sys.argv) == 2:  # one kind, in a child process
        import torch

        try:
            load().check(torch.zeros(100), int(sys.argv[1]))
        except RuntimeError as error:
            print(f"raised: {str(error).splitlines()[0]}")
        return 0
    load()  # build once (cached on disk by torch)
    for kind, name in enumerate(KINDS):
        run = subprocess.run([sys.executable, "-X", "faulthandler", __file__, str(kind)], capture_output=True, text=True)
        print(f"kind {kind} ({name}): exit {run.returncode}; {run.stdout.strip()} {run.stderr.strip()[-300:]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
