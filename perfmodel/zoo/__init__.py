"""Model zoo: small typed building blocks and the models made of them."""

from perfmodel.zoo.blocks import FFN, BlurPool, ConvBN, ConvFirstBlock, fold_batchnorm
from perfmodel.zoo.convfirstnet import MODELS, ConvFirstNet, register_model
from perfmodel.zoo.mbconv import FusedMBConv, MBConv, SqueezeExcite

__all__ = ["FFN", "BlurPool", "ConvBN", "ConvFirstBlock", "fold_batchnorm", "MBConv",
           "FusedMBConv", "SqueezeExcite", "ConvFirstNet", "MODELS", "register_model"]
