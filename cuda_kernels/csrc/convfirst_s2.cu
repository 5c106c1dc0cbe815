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
// C_in = 96 and 192 (ConvFirstNet-L; C_in not a power of two: the last U / S slice of C_in = 96 is
// 32 wide, Config::PARTIAL). 96 -> 192 as 64 -> 128 (stage 2 64x48 warp tiles), or 64-pixel tiles at
// two blocks per SM; 192 -> 384 on 64-pixel tiles (a 64 x 384 fp32 accumulator, 96 registers per
// thread), a 3-slot ring of 48 KB slices.
using Cfg96 = Config<96, 192, 64, 4, 2, 1>;
using Cfg96h = Config<96, 192, 64, 2, 2, 2, 64>;
using Cfg192h = Config<192, 384, 128, 1, 1, 1, 64>;
// Variants 2 and 3: deeper weight rings, more slices in flight, in shared memory that the
// phase-A buffers (80 KB) or the 227 KB limit leave free.
using Cfg32deep = Config<32, 64, 64, 4, 4, 2, 128, 9>;     // 9 x 8 KB slots inside phase A's 80 KB
using Cfg64deep = Config<64, 128, 64, 4, 2, 2, 128, 4>;    // 4 x 16 KB, two blocks per SM
using Cfg128hdeep = Config<128, 256, 128, 1, 1, 1, 64, 6>;  // 64-pixel tiles, 6 x 32 KB
using Cfg128deep = Config<128, 256, 128, 2, 2, 1, 128, 5>;  // 128-pixel tiles, 5 x 32 KB

cudaError_t launch_convfirst_s2(const Params& p, int cin, int cout, int variant, cudaStream_t stream, bool pdl) {
  if (cin * 2 != cout || variant < 0 || variant >= kVariants) return cudaErrorInvalidValue;
  if (cin == 96) return variant == 0 ? launch<Cfg96>(p, stream, pdl) : variant == 1 ? launch<Cfg96h>(p, stream, pdl)
                                                                                : cudaErrorInvalidValue;
  if (cin == 192) return variant == 0 ? launch<Cfg192h>(p, stream, pdl) : cudaErrorInvalidValue;
  if (variant == 1) {
    if (cin == 64) return launch<Cfg64x2>(p, stream, pdl);
    if (cin == 128) return launch<Cfg128h>(p, stream, pdl);
    return cudaErrorInvalidValue;
  }
  if (variant == 2) {
    if (cin == 32) return launch<Cfg32deep>(p, stream, pdl);
    if (cin == 64) return launch<Cfg64deep>(p, stream, pdl);
    return launch<Cfg128hdeep>(p, stream, pdl);
  }
  if (variant == 3) return cin == 128 ? launch<Cfg128deep>(p, stream, pdl) : cudaErrorInvalidValue;
  switch (cin) {
    case 32: return launch<Cfg32>(p, stream, pdl);
    case 64: return launch<Cfg64>(p, stream, pdl);
    case 128: return launch<Cfg128>(p, stream, pdl);
    default: return cudaErrorInvalidValue;
  }
}

int smem_bytes(int cin, int cout) {
  if (cin * 2 != cout) return 0;
  switch (cin) {
    case 32: return Cfg32::SMEM_BYTES;
    case 64: return Cfg64::SMEM_BYTES;
    case 96: return Cfg96::SMEM_BYTES > Cfg96h::SMEM_BYTES ? Cfg96::SMEM_BYTES : Cfg96h::SMEM_BYTES;
    case 128: return Cfg128::SMEM_BYTES;
    case 192: return Cfg192h::SMEM_BYTES;
    default: return 0;
  }
}

int hidden_chunk(int cin, int cout) {
  if (cin * 2 != cout) return 0;
  switch (cin) {
    case 32: return Cfg32::HC;
    case 64: return Cfg64::HC;
    case 96: return Cfg96::HC;
    case 128: return Cfg128::HC;
    case 192: return Cfg192h::HC;
    default: return 0;
  }
}

}  // namespace s2
