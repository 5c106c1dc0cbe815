"""Commands that need no model start without importing torch (faster than `import torch`)."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent

PROBE = """
import sys
import cli
try:
    cli.main({args!r})
except SystemExit as exc:
    assert exc.code == 0, exc.code
heavy = sorted(m for m in ("torch", "torchvision", "matplotlib") if m in sys.modules)
print("imported:", heavy, file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["hardware", "list"], ["hardware", "show", "h200-sxm"],
                                  ["models"], ["--help"]], ids=" ".join)
def test_commands_without_a_model_do_not_import_torch(args):
    done = subprocess.run([sys.executable, "-c", PROBE.format(args=args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "imported: []"
    assert done.stdout.strip()


def test_import_perfmodel_is_lazy_and_complete():
    code = ("import sys, perfmodel\n"
            "assert 'torch' not in sys.modules\n"
            "spec = perfmodel.load_spec('resnet50'); hw = perfmodel.load_hardware('h200-sxm')\n"
            "assert 'torch' not in sys.modules, 'loading a spec or hardware imports torch'\n"
            "assert callable(perfmodel.analyze) and 'torch' in sys.modules\n"
            "missing = [n for n in perfmodel.__all__ if not hasattr(perfmodel, n)]\n"
            "assert not missing, missing\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
