"""The whole torchvision classification zoo: MACs against published metadata, plan invariants."""
import warnings

import pytest
import torch
import torchvision

from perfmodel.build import meta_init
from perfmodel.costs import graph_costs
from perfmodel.plan import make_kernels
from perfmodel.trace import trace

ZOO = torchvision.models.list_models(module=torchvision.models)


def crops_with_ops(name):
    """{crop size: published GMACs} over the model's weights entries that carry `_ops`."""
    out = {}
    for weights in torchvision.models.get_model_weights(name):
        if "_ops" in weights.meta:
            out.setdefault(weights.transforms().crop_size[0], weights.meta["_ops"])
    return out


def build(name, crop):
    kwargs = {"image_size": crop} if name.startswith("vit_") else {}
    with warnings.catch_warnings(), meta_init():
        warnings.simplefilter("ignore")
        return torchvision.models.get_model(name, **kwargs)


def test_zoo_is_large():
    assert len(ZOO) >= 70


# AlexNet and the VGGs have no residual block: their block plan is the layer plan, with a warning that says so
@pytest.mark.filterwarnings("ignore:block plan. no module matched the default block classes")
@pytest.mark.parametrize("name", ZOO)
def test_macs_match_torchvision_and_plans_are_consistent(name):
    crops = crops_with_ops(name)
    if not crops:
        pytest.skip(f"{name} publishes no _ops")
    for crop, gmacs in crops.items():
        graph = trace(build(name, crop), [(1, 3, crop, crop)], torch.float16)
        macs = sum(c.macs for c in graph_costs(graph) if c is not None)
        # _ops is GMACs per image rounded to 3 decimals: allow 0.5% or the rounding
        assert abs(macs / 1e9 - gmacs) <= max(0.005 * gmacs, 0.0005), (crop, macs / 1e9, gmacs)
    kernels = {p: make_kernels(graph, p) for p in ("op", "eager", "layer", "inductor", "block")}
    for plan, ks in kernels.items():
        assert sum(k.macs for k in ks) == macs, plan  # every plan conserves MACs
    moved = {plan: sum(k.dram_bytes for k in ks) for plan, ks in kernels.items()}
    assert moved["block"] <= moved["layer"] <= moved["inductor"]  # the runtimes' rules only
    assert moved["layer"] <= moved["op"] and moved["layer"] <= moved["eager"]
    fast_path = any(f.cls == "MultiheadAttention" for n in graph.nodes for f in n.scope)
    if not fast_path:  # eager's rules add kernels and bytes, except mha-fast-path's fusion
        assert moved["op"] <= moved["eager"]
        assert len(kernels["op"]) <= len(kernels["eager"])
    assert len(kernels["layer"]) < len(kernels["op"]) and len(kernels["layer"]) < len(kernels["eager"])
    assert len(kernels["layer"]) <= len(kernels["inductor"])


@pytest.mark.parametrize("name, block, count", [
    ("convnext_tiny", "CNBlock", 3 + 3 + 9 + 3),
    ("resnet50", "Bottleneck", 3 + 4 + 6 + 3),
])
def test_block_plan_gives_one_kernel_per_block(name, block, count):
    model = build(name, 224)
    graph = trace(model, [(2, 3, 224, 224)], torch.float16)
    block_paths = {p for p, m in model.named_modules() if type(m).__name__ == block}
    assert len(block_paths) == count
    kernels = make_kernels(graph, f"block:{block}")
    names = [k.name for k in kernels]
    assert sorted(n for n in names if n in block_paths) == sorted(block_paths)
    for k in kernels:
        inside = {any(f.path in block_paths for f in graph.nodes[i].scope) for i in k.nodes}
        assert inside == {k.name in block_paths}  # no block op leaks into another kernel
