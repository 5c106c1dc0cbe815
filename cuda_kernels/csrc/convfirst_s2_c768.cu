// The stride-2 ConvFirst block 384 -> 768 (ConvFirstNet-L's last stride-2 block) on the stride-2 template
// (convfirst_s2.cuh), in the C = 768 extension. A 64 x 768 fp32 accumulator is 192 registers per thread at
// 256 threads, so each 64-pixel tile is two thread blocks (Config::NSPLIT = 2, blockIdx.y), one per half of
// the output columns, each as the 192 -> 384 configuration computes its tile: stage-1 warp tiles 64 x 16,
// stage-2 64 x 48 (96 accumulator registers), V and shortcut slices of 384 rows x 64 k = 48 KB, two ring
// slots (A_s 48 KB + H_s 48 KB + ring 96 KB = 192 KB). Phase A (conv, blurs) and stage 1 are computed by both.
#include "convfirst_c768.h"
#include "convfirst_s2.cuh"

namespace s2 {

// Config<CIN, COUT (per block), HC, WM1, WM2, MINB, BM, STAGES, NSPLIT>
using Cfg384 = Config<384, 384, 128, 1, 1, 1, 64, 2, 2>;
// Variant 1: the two blocks of a tile are a cluster splitting stage 1 (64 hidden columns each, stage-1 warp tiles
// 32 x 16) and exchanging their H panels through distributed shared memory (Config CLUSTER_H): no MAC twice
// but the conv and the blurs.
using Cfg384c = Config<384, 384, 128, 2, 1, 1, 64, 2, 2, true>;

cudaError_t launch_384_768(const Params& p, int variant, cudaStream_t stream) {
  switch (variant) {
    case 0: return launch<Cfg384>(p, stream);
    case 1: return launch<Cfg384c>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}
int smem_bytes_384_768() { return Cfg384::SMEM_BYTES; }
int hidden_chunk_384_768() { return Cfg384::HC; }

}  // namespace s2
