// The block-fusion PTX wrappers (ptx.cuh) that the MBConv kernels call, named in namespace mb.
#pragma once
#include "ptx.cuh"

namespace mb {

using bf::cp_async16;
using bf::cp_async_commit;
using bf::cp_async_wait;
using bf::ldmatrix_x4;
using bf::mma_m16n8k16;
using bf::smem_addr;

}  // namespace mb
