"""The parts of perfmodel bench that need no GPU."""
from types import SimpleNamespace

import pytest

import perfmodel
from perfmodel.bench import _innermost_module, _spec_reference, percentile

from test_cli import DATA


def test_percentile_interpolates():
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert percentile(values, 0.5) == 3.0
    assert percentile(values, 0.2) == pytest.approx(1.8)  # 1 + 0.8 * (2 - 1)
    assert percentile(values, 0.8) == pytest.approx(4.2)


def test_spec_reference_is_portable_for_builtins():
    assert _spec_reference(perfmodel.load_spec("resnet50")) == "resnet50"
    assert _spec_reference(perfmodel.load_spec(DATA / "tiny.yaml")).endswith("tiny.yaml")


def test_kernels_are_attributed_to_the_innermost_module():
    root = SimpleNamespace(name="module:", cpu_parent=None)
    block = SimpleNamespace(name="module:layer1.0", cpu_parent=root)
    conv = SimpleNamespace(name="module:layer1.0.conv1", cpu_parent=block)
    op = SimpleNamespace(name="aten::convolution", cpu_parent=conv)
    loose = SimpleNamespace(name="aten::add_", cpu_parent=None)
    assert _innermost_module(op) == "layer1.0.conv1"
    assert _innermost_module(loose) == ""
