"""Block patterns and custom groups say what they matched: a pattern or glob that matches no
module fails (exit 2), and the default block classes cover torchvision's, timm's and the zoo's
residual blocks."""
import pytest
from torch import nn

import perfmodel
from perfmodel.api import reanalyze
from perfmodel.build import meta_init
from perfmodel.errors import InputError

from helpers import DATA, TINY, run_main
from helpers import write_spec as spec_file


def test_block_plan_without_any_default_block_says_it_is_the_layer_plan(tmp_path, capsys):
    spec = spec_file(tmp_path, TINY)
    code, out, err = run_main(["layers", spec, "--plan", "block"], capsys)
    assert code == 0
    assert err.strip() == ("warning: block plan: no module matched the default block classes "
                           "(the residual blocks of torchvision, timm, transformers and the zoo), "
                           "so this is the layer plan; name this model's blocks with block:CLASS or a path glob "
                           "(module classes here: BatchNorm2d, Conv2d, Linear, TinyNet)")
    assert "stem" in out and "head" in out  # conv+bn+relu, mean, linear: the layer kernels


def test_every_named_block_pattern_must_match(tmp_path, capsys):
    spec = spec_file(tmp_path, TINY)
    code, _, err = run_main(["layers", spec, "--plan", "block:Conv2d,NoSuchBlock"], capsys)
    assert code == 2
    assert "block pattern(s) NoSuchBlock matched no module" in err


def test_group_glob_that_matches_nothing_names_the_glob_and_the_spec(tmp_path, capsys):
    spec = spec_file(tmp_path, TINY + "groups: [[stem, bn], [nosuch.*]]\n")
    code, out, err = run_main(["layers", spec], capsys)
    assert code == 2 and out == ""
    assert err.strip() == (f"error: {spec}: field 'groups[1]': module-path glob 'nosuch.*' "
                           f"matched no module (top-level modules here: bn, head, stem)")


def test_group_glob_that_matches_is_one_kernel():
    net = nn.Sequential(nn.Conv2d(3, 8, 1), nn.ReLU(), nn.Conv2d(8, 8, 1))
    r = perfmodel.analyze(net, (3, 4, 4), batch=1,
                          plan=perfmodel.PlanSpec("layer", groups=(("0", "2"),)))
    assert [k.kernel.name for k in r.kernels] == ["0,2"]
    with pytest.raises(InputError, match="glob '3' matched no module"):
        perfmodel.analyze(net, (3, 4, 4), batch=1,
                          plan=perfmodel.PlanSpec("layer", groups=(("3",),)))


def _timm_blocks(name, depths, path):
    timm = pytest.importorskip("timm")
    with meta_init():
        model = timm.create_model(name)
    result = perfmodel.analyze(model.eval(), (3, 224, 224), batch=1, plan="block")
    layer = reanalyze(result, plan="layer")
    expected = {path(i, j) for i, depth in enumerate(depths) for j in range(depth)}
    names = [k.kernel.name for k in result.kernels]
    assert expected <= set(names)  # every residual block is one kernel
    assert not [n for n in names if any(n.startswith(b + ".") for b in expected)]
    assert result.macs == layer.macs and len(result.kernels) < len(layer.kernels)


@pytest.mark.parametrize("name, depths, path", [
    ("convnext_atto", (2, 2, 6, 2), lambda i, j: f"stages.{i}.blocks.{j}"),      # ConvNeXtBlock
    ("vit_tiny_patch16_224", (12,), lambda i, j: f"blocks.{j}"),                  # Block
    ("efficientnet_b0", (1, 2, 2, 3, 3, 4, 1), lambda i, j: f"blocks.{i}.{j}"),  # DS, IR
    ("resnet18", (2, 2, 2, 2), lambda i, j: f"layer{i + 1}.{j}"),                # BasicBlock
], ids=["convnext", "vit", "efficientnet", "resnet"])
def test_default_blocks_cover_timm(name, depths, path):
    _timm_blocks(name, depths, path)
