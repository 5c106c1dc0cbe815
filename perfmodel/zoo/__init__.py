"""Model zoo: small typed building blocks and the models made of them."""

from perfmodel.zoo.blocks import FFN, BlurPool, ConvBN, ConvFirstBlock, fold_batchnorm

__all__ = ["FFN", "BlurPool", "ConvBN", "ConvFirstBlock", "fold_batchnorm"]
