// The stride-2 ConvFirst block 256 -> 512 (ConvFirstNet-M/H200's last stride-2 block): one more
// configuration of the stride-2 template (convfirst_s2.cuh), built into the C = 512 extension
// (perfmodel_convfirst_c512) so that it cannot break the stride-2 extension before a GPU run.
#pragma once
#include "convfirst_s2.h"

namespace s2 {
// 64-pixel tiles (a 64 x 512 fp32 accumulator: 128 registers per thread), hidden chunks of 128,
// a two-slot ring of 64 KB slices. Same contract as launch_convfirst_s2.
cudaError_t launch_256_512(const Params& p, cudaStream_t stream, bool pdl = false);
int smem_bytes_256_512();
int hidden_chunk_256_512();
}  // namespace s2
