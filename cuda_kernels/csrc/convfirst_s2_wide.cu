// Instantiation of the stride-2 ConvFirst template for 256 -> 512 (see convfirst_s2_wide.h).
#include "convfirst_s2.cuh"
#include "convfirst_s2_wide.h"

namespace s2 {

// Config<CIN, COUT, HC, WM1, WM2, MINB, BM, STAGES>: stage-1 warp tile 64 x 16, stage-2 64 x 64.
using Cfg256 = Config<256, 512, 128, 1, 1, 1, 64, 2>;

cudaError_t launch_256_512(const Params& p, cudaStream_t stream, bool pdl) { return launch<Cfg256>(p, stream, pdl); }
int smem_bytes_256_512() { return Cfg256::SMEM_BYTES; }
int hidden_chunk_256_512() { return Cfg256::HC; }

}  // namespace s2
