"""Block-fusion CUDA kernels (paper eq. 32; README.md here): fused FFN and ConvFirst, NHWC float16.

The extension is built on first use (``torch.utils.cpp_extension.load``); importing this
package needs no GPU and no compiler.
"""

from cuda_kernels.convfirst_c512 import FusedConvFirstC512
from cuda_kernels.convfirst_c768 import FusedConvFirstC768
from cuda_kernels.convfirst_s2 import FusedConvFirstDown
from cuda_kernels.effnet_head import FusedEffNetHead
from cuda_kernels.effnet_stem import FusedEffNetStem
from cuda_kernels.mbconv import FusedMBConv
from cuda_kernels.stem import FusedStem
from cuda_kernels.stem_mbconv import FusedStemMBConv
from cuda_kernels.modules import BlockSwap, FusedConvFirstBlock, FusedFFN, replace_blocks
from cuda_kernels.ops import (
    SUPPORTED_CHANNELS,
    SUPPORTED_EXPANSIONS,
    SUPPORTED_SIZES,
    BlockWeights,
    convfirst_block,
    ffn,
    pack_conv_weight,
    prepare_weights,
    run_block,
)

# every module replace_blocks can put in a network: what bench.fused_model checks
FUSED_MODULES = (FusedConvFirstBlock, FusedConvFirstDown, FusedConvFirstC512, FusedConvFirstC768, FusedFFN, FusedMBConv,
                 FusedStem, FusedEffNetStem, FusedStemMBConv, FusedEffNetHead)

__all__ = [
    "FUSED_MODULES",
    "SUPPORTED_CHANNELS", "SUPPORTED_EXPANSIONS", "SUPPORTED_SIZES", "BlockSwap", "BlockWeights", "FusedConvFirstBlock",
    "FusedConvFirstC512", "FusedConvFirstC768", "FusedConvFirstDown", "FusedFFN", "convfirst_block", "ffn", "pack_conv_weight", "prepare_weights", "replace_blocks",
    "run_block", "FusedMBConv", "FusedStem", "FusedEffNetStem", "FusedStemMBConv", "FusedEffNetHead",
]
