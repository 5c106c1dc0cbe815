"""Shared fixtures. Helpers that test files share live in helpers.py (this folder is on the
path), so that no test file imports another."""
from dataclasses import replace

import pytest
import torch

import perfmodel
import perfmodel.api
import perfmodel.measured
from perfmodel.errors import PerfmodelError
from perfmodel.resources import builtin_dir
from perfmodel.spec import ModelSpec, load_spec


def pytest_collection_modifyitems(config, items):
    """Skip tests marked `cuda` cleanly on machines without a GPU."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA; no GPU on this machine")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


class TracedOnce:
    """`analyze_spec` that traces each built-in spec once per test run and batch and dtype:
    many tests analyse resnet50 or efficientnet_b0 under another plan, hardware or byte
    model, which only re-plans the traced graph (what `reanalyze` does). Any other spec, a
    strict analysis with unsupported ops, and every error take the real function."""

    def __init__(self, analyze_spec):
        self.analyze_spec = analyze_spec
        self.traced: dict[tuple, perfmodel.api.Result] = {}
        self.hits = 0

    def __call__(self, spec, *, strict=False, l2_carry=False, **overrides):
        found = self._builtin(spec, overrides)
        if found is None:
            return self.analyze_spec(spec, strict=strict, l2_carry=l2_carry, **overrides)
        key, resolved = found
        base = self.traced.get(key)
        if base is None or (strict and base.unsupported):
            result = self.analyze_spec(spec, strict=strict, l2_carry=l2_carry, **overrides)
            self.traced.setdefault(key, result)
            return result
        try:
            hardware = perfmodel.load_hardware(resolved.hardware)
            hardware.peak_ops(resolved.dtype)
        except PerfmodelError:  # the real function names the source of the error
            return self.analyze_spec(spec, strict=strict, l2_carry=l2_carry, **overrides)
        self.hits += 1
        return perfmodel.api._plan(replace(base, model=resolved.name, plan=resolved.plan,
                                           hardware=hardware, l2_carry=l2_carry))

    @staticmethod
    def _builtin(spec, overrides):
        """(key, spec with overrides) for a built-in spec, else None."""
        try:
            loaded = spec if isinstance(spec, ModelSpec) else load_spec(spec)
            resolved = loaded.with_overrides(**overrides)
        except PerfmodelError:
            return None
        if not resolved.path or not str(resolved.path).startswith(str(builtin_dir("models"))):
            return None
        key = (resolved.path, resolved.model, repr(resolved.kwargs), resolved.inputs,
               resolved.input_dtypes, resolved.batch, resolved.dtype)
        return key, resolved


@pytest.fixture(scope="session", autouse=True)
def traced_once():
    """Every analysis of a built-in spec in this run goes through one TracedOnce."""
    cached = TracedOnce(perfmodel.api.analyze_spec)
    patch = pytest.MonkeyPatch()
    for module in (perfmodel, perfmodel.api, perfmodel.measured):
        patch.setattr(module, "analyze_spec", cached)
    yield cached
    patch.undo()
