"""Hugging Face transformers models built from their configs: no download, no weights.

A spec names the factory and the config as keyword arguments::

    model: perfmodel.hf:from_config
    kwargs: {model_type: bert}                     # BertModel(BertConfig()), BERT-base
    kwargs: {model_type: vit, image_size: 384}     # ViTModel at 384 px
    kwargs: {model_type: vit, model_class: AutoModelForImageClassification, num_labels: 1000}

Every key but ``model_type`` and ``model_class`` is a config field, overriding the
config class's defaults (which are the base-size models: BERT-base, ViT-B/16, GPT-2 ...).
"""
from __future__ import annotations


def from_config(model_type: str, model_class: str = "AutoModel", **config):
    """``transformers.<model_class>.from_config(AutoConfig.for_model(model_type, **config))``.

    The attention implementation defaults to ``sdpa`` (one fused attention op per layer),
    what transformers picks on a GPU."""
    try:
        import transformers
    except ImportError as exc:
        raise ImportError("perfmodel.hf needs the transformers package: "
                          "pip install transformers") from exc
    factory = getattr(transformers, model_class, None)
    if factory is None or not hasattr(factory, "from_config"):
        raise ValueError(f"transformers has no model class {model_class!r} with from_config "
                         "(e.g. AutoModel, AutoModelForImageClassification, BertModel)")
    attn = config.pop("attn_implementation", "sdpa")
    cfg = transformers.AutoConfig.for_model(model_type, **config)
    return factory.from_config(cfg, attn_implementation=attn)
