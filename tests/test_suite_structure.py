"""The test suite's own structure: shared helpers in helpers.py, and the per-run trace cache
of conftest.py returns what a fresh analysis returns."""
import ast
from pathlib import Path

import perfmodel

TESTS = Path(__file__).parent


def test_test_files_import_helpers_never_each_other():
    for path in TESTS.glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not [n for n in names if n.startswith(("test_", "conftest"))], path.name


def test_a_cached_trace_gives_the_fresh_analysis(traced_once):
    first = perfmodel.analyze_spec("resnet50", batch=2, plan="layer")
    hits = traced_once.hits
    again = perfmodel.analyze_spec("resnet50", batch=2, plan="block", hardware="h200-sxm",
                                   l2_carry=True)
    assert traced_once.hits == hits + 1 and again.graph is first.graph
    fresh = traced_once.analyze_spec("resnet50", batch=2, plan="block", hardware="h200-sxm",
                                     l2_carry=True)
    assert again.graph is not fresh.graph
    assert again.summary() == fresh.summary()
    assert [(k.kernel.name, k.kernel.dram_bytes, k.t_min_s) for k in again.kernels] == \
        [(k.kernel.name, k.kernel.dram_bytes, k.t_min_s) for k in fresh.kernels]
