"""Models users bring: timm and transformers through specs, MACs counted by hand."""
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn

import perfmodel
from perfmodel.api import reanalyze
from perfmodel.errors import InputError, TraceError

SPECS = Path(__file__).parent.parent / "examples" / "specs"


def _analyze(name, **overrides):
    return perfmodel.analyze_spec(SPECS / f"{name}.yaml", **overrides)


def convnext_atto_macs() -> int:
    """Per image at 224 px: a 4x4/4 stem, stages of (depth, width) at 56, 28, 14, 7 px with
    a 2x2/2 downsampling conv before stages 1-3; a block is a 7x7 depthwise conv and a
    4x MLP of 1x1 convs; the head a 320 -> 1000 linear layer."""
    stem = 56 * 56 * 40 * 3 * 4 * 4
    total, previous = stem, None
    for depth, width, side in ((2, 40, 56), (2, 80, 28), (6, 160, 14), (2, 320, 7)):
        pixels = side * side
        if previous:
            total += pixels * width * previous * 2 * 2
        total += depth * (pixels * width * 7 * 7 + 2 * pixels * width * 4 * width)
        previous = width
    return total + 320 * 1000


def test_timm_spec_counts_convnext_atto_by_hand():
    pytest.importorskip("timm")
    r = _analyze("timm_convnext_atto", batch=2)
    assert convnext_atto_macs() == 547_332_480
    assert r.macs == 2 * convnext_atto_macs() and not r.unsupported
    assert abs(r.gmacs_per_image - 0.6) < 0.06  # timm's model card: "GMACs: 0.6"
    block = reanalyze(r, plan="block")  # every ConvNeXtBlock one kernel
    assert sum(k.kernel.name.startswith("stages.") and ".blocks." in k.kernel.name
               for k in block.kernels) == 2 + 2 + 6 + 2
    assert block.macs == r.macs and block.totals.dram_bytes < r.totals.dram_bytes


def _paths_of(result, cls: str) -> set[str]:
    """Module paths of the class's instances (transformers renames them across versions)."""
    paths = {f.path for node in result.graph.nodes for f in node.scope if f.cls == cls}
    assert len(paths) == 12
    return paths


def encoder_macs(tokens: int, layers: int = 12, width: int = 768, hidden: int = 3072) -> int:
    """A BERT/ViT encoder per sequence: per token and layer Q, K, V and the output
    projection (4 w^2) and the MLP (2 w h); attention's Q K^T and P V (2 L w); then the
    pooler, one w x w linear layer on the first token."""
    per_token = layers * (4 * width ** 2 + 2 * width * hidden + 2 * tokens * width)
    return tokens * per_token + width * width


def test_bert_base_from_config_with_token_ids():
    pytest.importorskip("transformers")
    r = _analyze("bert_base", batch=4)
    assert "embedding" in {n.name for n in r.graph.nodes} and not r.unsupported
    assert encoder_macs(128) == 11_174_215_680
    assert r.macs == 4 * encoder_macs(128)
    assert r.graph.values[r.graph.inputs[0]].meta.dtype is torch.int64
    assert len(r.graph.outputs) == 2  # last_hidden_state and pooler_output of a ModelOutput
    block = reanalyze(r, plan="block")  # every BertLayer one kernel
    assert _paths_of(r, "BertLayer") <= {k.kernel.name for k in block.kernels}
    assert block.macs == r.macs


def test_hf_vit_base_from_config():
    pytest.importorskip("transformers")
    r = _analyze("hf_vit_base", batch=2)
    patches = 196 * 768 * 3 * 16 * 16  # the 16x16/16 patch embedding
    assert r.macs == 2 * (patches + encoder_macs(197)) and not r.unsupported
    assert abs(r.gmacs_per_image - 17.56) < 0.01  # torchvision's ViT_B_16 _ops: 17.564
    block = reanalyze(r, plan="block")  # every ViTLayer one kernel
    assert _paths_of(r, "ViTLayer") <= {k.kernel.name for k in block.kernels}


def test_hf_factory_names_a_bad_class():
    pytest.importorskip("transformers")
    spec = perfmodel.load_spec(SPECS / "bert_base.yaml")
    spec = type(spec)(**{**spec.__dict__, "kwargs": {"model_type": "bert",
                                                     "model_class": "NoSuchModel"}})
    with pytest.raises(InputError, match="transformers has no model class 'NoSuchModel'"):
        perfmodel.analyze_spec(spec)


@dataclass
class _Out:
    features: torch.Tensor
    note: str = "not a tensor"


class _DataclassNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return _Out(self.fc(x))


def test_dataclass_output_is_an_output():
    r = perfmodel.analyze(_DataclassNet(), (8,), batch=2)
    assert r.macs == 2 * 8 * 4
    assert r.kernels[-1].kernel.output_bytes == 2 * 4 * 2  # written: the model returns it


class _KeywordNet(nn.Module):
    def forward(self, x, *, mask):
        return x * mask


class _NothingNet(nn.Module):
    def forward(self, x):
        x.relu()


def test_keyword_only_input_is_a_clear_error():
    with pytest.raises(TraceError, match=r"_KeywordNet.forward\(x, \*, mask\) cannot take the 1 "
                       r"input\(s\) given .*positionally, in order"):
        perfmodel.analyze(_KeywordNet(), (8,), batch=2)


def test_forward_without_tensor_output_is_a_clear_error():
    with pytest.raises(TraceError, match="returned NoneType, with no tensor in it"):
        perfmodel.analyze(_NothingNet(), (8,), batch=2)
