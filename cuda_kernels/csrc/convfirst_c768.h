// Host-side interface of ConvFirstNet-L's C = 768 kernels, the extension perfmodel_convfirst_c768:
// the stride-1 block at C = 768 (convfirst_c768.cu, wgmma, a cluster of two thread blocks per 64-pixel
// tile) and the stride-2 block 384 -> 768 (convfirst_s2_c768.cu, the stride-2 template with its output
// columns split over two thread blocks). Both are off by default (CUDA_KERNELS_C768) until their GPU tests pass.
#pragma once
#include <cuda_runtime.h>

#include "convfirst_c512.h"
#include "convfirst_s2.h"

namespace c768 {
// Weight slots per hidden chunk of 128 and rank: 6 U slots (64 hidden rows x 2 k panels of 64) and
// 2 k panels x 3 V blocks (128 output rows of the rank's 384); wpack holds rank 0's stream, then rank 1's.
constexpr int kSlotsPerChunk = 12;
// Variants: 0, the conv split between the ranks (each convolves 6 of the 12 64-channel slices and sends its
// 48 KB of X to the partner through distributed shared memory); 1, each rank convolves all 12.
constexpr int kVariants = 2;
// Params as c512::Params with C = 768; cudaErrorInvalidValue for another shape (hidden % 128, W > 28) or
// variant, cudaErrorNoKernelImageForDevice off compute capability 9.0, cudaErrorInvalidConfiguration without
// the shared memory; all before launching.
cudaError_t launch(const c512::Params& p, int variant, cudaStream_t stream);
int smem_bytes();
}  // namespace c768

namespace s2 {
// 384 -> 768: 64-pixel tiles, each computed by two thread blocks (output columns 0..383 and 384..767), hidden
// chunks of 128, a two-slot ring of 48 KB slices. Variant 0: the conv, blurs and stage 1 computed by both blocks;
// 1: the two blocks are a cluster that splits stage 1 and exchanges H through distributed shared memory.
constexpr int kS2Variants = 2;
cudaError_t launch_384_768(const Params& p, int variant, cudaStream_t stream);
int smem_bytes_384_768();
int hidden_chunk_384_768();
}  // namespace s2
