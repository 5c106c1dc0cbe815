// Instantiations of the stride-2 ConvFirst kernel, one tile configuration per (C_in, C_out).
#include "convfirst_s2.cuh"

namespace s2 {

// Config<CIN, COUT, HC, WM1, WM2, MINB[, BM]>: hidden chunk, warp rows of stage 1 and 2, blocks per
// SM, pixels per tile (128 unless given).
using Cfg32 = Config<32, 64, 64, 4, 4, 2>;
using Cfg64 = Config<64, 128, 64, 4, 2, 1>;
using Cfg64x2 = Config<64, 128, 64, 4, 2, 2>;  // two blocks per SM, at the price of ~200 B of spills
using Cfg128 = Config<128, 256, 128, 2, 2, 1>;
using Cfg128h = Config<128, 256, 128, 1, 1, 1, 64>;  // 64-pixel tiles: twice the tiles, for small images

cudaError_t launch_convfirst_s2(const Params& p, int cin, int cout, int variant, cudaStream_t stream) {
  if (cin * 2 != cout || variant < 0 || variant >= kVariants) return cudaErrorInvalidValue;
  if (variant == 1) {
    if (cin == 64) return launch<Cfg64x2>(p, stream);
    if (cin == 128) return launch<Cfg128h>(p, stream);
    return cudaErrorInvalidValue;
  }
  switch (cin) {
    case 32: return launch<Cfg32>(p, stream);
    case 64: return launch<Cfg64>(p, stream);
    case 128: return launch<Cfg128>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

int smem_bytes(int cin, int cout) {
  if (cin * 2 != cout) return 0;
  switch (cin) {
    case 32: return Cfg32::SMEM_BYTES;
    case 64: return Cfg64::SMEM_BYTES;
    case 128: return Cfg128::SMEM_BYTES;
    default: return 0;
  }
}

int hidden_chunk(int cin, int cout) {
  if (cin * 2 != cout) return 0;
  switch (cin) {
    case 32: return Cfg32::HC;
    case 64: return Cfg64::HC;
    case 128: return Cfg128::HC;
    default: return 0;
  }
}

}  // namespace s2
