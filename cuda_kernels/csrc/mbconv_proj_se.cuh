// project_se (CUDA_KERNELS_PROJ_SE=1, off until measured; NOTES.md "Current state", session 32): the SE inside the
// projection, the scale folded into V. Included by mbconv_v3.cu inside namespace mb, after project_v9's pieces
// (v9_prologue, v9_shortcut_load, v9_epilogue, launch_v9's helpers), which it reuses.
//
// Where project_v9s runs (H x W a multiple of 16: a task lies in one image), CTA c takes the contiguous tasks
// [c T / G, (c + 1) T / G) of the T = N H W / 16, G >= N CTAs: as even a share as project_v9s's grid stride, within at
// most two images. After the PDL wait it copies its warps' first D rows (they fly meanwhile) and computes those
// images' SE itself (pool of kernel 1's band sums, FC1, SiLU, FC2, sigmoid), then scales V's rows once per image,
// V'[c][h] = V[c][h] s[h] in fp16 (the first image's in place, the second's into a copy), so that the unit loop is
// LDS -> HMMA (project_v9s applies s to each A element in fp32: LDS, widen, multiply, pack). The SE kernel is not
// launched. Numerics: s V rounded to fp16 where project_v9s rounds s D (PyTorch's fp16 block rounds s D too); the SE
// in fp32 as se_v3 computes it (FC1's sums in another order).
// Measured and removed (s32 call 2): one image a CTA (split CTAs an image where two fit an SM), whose slowest warp
// at 3.1 had 7 tasks against project_v9s's 6 (projection 21.3 -> 25.6 us under Nsight Compute, the block +1.3 us); and
// A and V' by ldmatrix from padded rows (37 instructions per three units against 84): slower still, 25.6 -> 28.0.

// Shared memory: V (V' of the range's first image, in place), the warps' two-task rings (project_v9t's), V' of its
// second image, then pooled and the scale [2][hid_pad], squeezed [2][sq rounded up to 4], W1 and W2 (fp32).
__host__ __device__ constexpr int project_se_v1_offset(int hidden, int c_out) {
  return project_v9t_smem_bytes(hidden, c_out);
}
__host__ __device__ constexpr int project_se_float_offset(int hidden, int c_out) {
  return project_se_v1_offset(hidden, c_out) + project_v9_smem_bytes(hidden, c_out);
}
__host__ __device__ constexpr int project_se_smem_bytes(int hidden, int hid_pad, int c_out, int sq) {
  return project_se_float_offset(hidden, c_out) + (4 * hid_pad + 2 * round_up(sq, 4) + 2 * sq * hidden) * 4;
}

// One unit (16 channels, k permuted as v9_unit_scaled's) with the scale already in V: A straight from the ring.
template <int NT>
__device__ __forceinline__ void v9_unit_plain(float (&acc)[NT][4], uint2 lo, uint2 hi, const __half* b_s, int ldb,
                                              int u, int g, int t) {
  const uint32_t a[4] = {lo.x, hi.x, lo.y, hi.y};
  const __half* b_row = b_s + g * ldb + u * 16 + 4 * t;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const uint2 b = *reinterpret_cast<const uint2*>(b_row + nt * 8 * ldb);
    mma_m16n8k16(acc[nt], a, b.x, b.y);
  }
}

// The SE scales of images n0 .. n0 + images - 1 (images <= 2) into scale [2][hid_pad] (shared memory; W1 / W2 there
// already), every thread of the CTA: pooled [2][hid_pad], squeezed [2][sq4] as scratch.
__device__ __forceinline__ void project_se_scales(const Params& p, int n0, int images, float* pooled, float* squeezed,
                                                  float* scale, const float* w1s, const float* w2s, int tid, int lane,
                                                  int warp) {
  const float inv = 1.f / float(p.Ho * p.Wo);
  const int hp = p.hid_pad, sq4 = round_up(p.sq, 4);
  for (int i = tid; i < images * p.hidden; i += kProjV9Threads) {
    const int m = i >= p.hidden, c = i - m * p.hidden;
    float s = 0.f;
    for (int b = 0; b < p.row_blocks; ++b) s += p.partial[((size_t)(n0 + m) * p.row_blocks + b) * hp + c];
    pooled[m * hp + c] = s * inv;
  }
  __syncthreads();
  for (int jj = warp; jj < images * p.sq; jj += kProjV9Warps) {  // FC1: a warp a row, the lanes across the channels
    const int m = jj >= p.sq, j = jj - m * p.sq;
    float s = 0.f;
    for (int c = lane; c < p.hidden; c += 32) s = fmaf(w1s[j * p.hidden + c], pooled[m * hp + c], s);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) {
      const float v = s + p.b_se1[j];
      squeezed[m * sq4 + j] = v / (1.f + expf(-v));
    }
  }
  __syncthreads();
  for (int i = tid; i < images * p.hidden; i += kProjV9Threads) {  // FC2: a thread a channel
    const int m = i >= p.hidden, c = i - m * p.hidden;
    float s = p.b_se2[c];
    for (int j = 0; j < p.sq; ++j) s = fmaf(w2s[c * p.sq + j], squeezed[m * sq4 + j], s);
    scale[m * hp + c] = 1.f / (1.f + expf(-s));
  }
  __syncthreads();
}

template <int NT>
__global__ void __launch_bounds__(kProjV9Threads) project_se_kernel(const Params p) {
  extern __shared__ __align__(16) uint8_t smem_se[];
  __half* b_s = reinterpret_cast<__half*>(smem_se);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int ldb = project_v9_ldb(p.hidden), task_halves = 16 * p.hidden;
  __half* mine = reinterpret_cast<__half*>(smem_se + project_v9_smem_bytes(p.hidden, p.C_out)) + warp * 2 * task_halves;
  __half* b_s1 = reinterpret_cast<__half*>(smem_se + project_se_v1_offset(p.hidden, p.C_out));
  float* pooled = reinterpret_cast<float*>(smem_se + project_se_float_offset(p.hidden, p.C_out));
  float* scale = pooled + 2 * p.hid_pad;
  float* squeezed = scale + 2 * p.hid_pad;
  float* w1s = squeezed + 2 * round_up(p.sq, 4);  // W1 [sq][hidden], then W2 [hidden][sq]
  float* w2s = w1s + p.sq * p.hidden;
  const int hw = p.Ho * p.Wo, per_image = hw / 16, P = p.N * hw, units = p.hidden / 16;
  const long long tasks = (long long)p.N * per_image;
  const int first = (int)(tasks * blockIdx.x / gridDim.x), end = (int)(tasks * (blockIdx.x + 1) / gridDim.x);
  if (first >= end) return;
  const int n0 = first / per_image, images = (end - 1) / per_image - n0 + 1;  // 1 or 2 (gridDim.x >= N)
  const int boundary = (n0 + 1) * per_image;                                  // the second image's first task
  // the SE's weights (one cp.async group; they do not depend on kernel 1), then V, the biases and the PDL wait
  for (int i = tid; i < p.sq * p.hidden / 4; i += kProjV9Threads) {
    cp_async16(smem_addr(w1s + 4 * i), p.w_se1 + 4 * i, true);
    cp_async16(smem_addr(w2s + 4 * i), p.w_se2 + 4 * i, true);
  }
  bf::cp_async_commit();
  float2 bias[NT];
  v9_prologue<NT>(p, b_s, ldb, bias, tid, t);

  int task = first + warp;
  auto issue = [&](int tk, int slot) {  // the task's 16 rows of D into the warp's slot; a group per call
    if (tk < end) {
      const __half* src = p.d + (size_t)tk * task_halves;
      const uint32_t dst = smem_addr(mine + slot * task_halves);
      for (int i = lane; i < 2 * p.hidden; i += 32) cp_async16(dst + i * 16, src + i * 8, true);
    }
    bf::cp_async_commit();
  };
  issue(task, 0);      // the first rows fly while the SE runs
  cp_async_wait<1>();  // this thread's W1 / W2 copies (project_se_scales' first barrier makes them everyone's)
  project_se_scales(p, n0, images, pooled, squeezed, scale, w1s, w2s, tid, lane, warp);
  for (int i = tid; i < p.C_out * (p.hidden / 2); i += kProjV9Threads) {  // V'0 in place, V'1 into its copy
    const int r = i / (p.hidden / 2), c = 2 * (i - r * (p.hidden / 2));
    __half2* v = reinterpret_cast<__half2*>(b_s + r * ldb + c);
    const float2 f = __half22float2(*v);
    if (images == 2)
      *reinterpret_cast<__half2*>(b_s1 + r * ldb + c) =
          __floats2half2_rn(f.x * scale[p.hid_pad + c], f.y * scale[p.hid_pad + c + 1]);
    *v = __floats2half2_rn(f.x * scale[c], f.y * scale[c + 1]);
  }
  __syncthreads();

  uint32_t res[2][NT];
  float acc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
  for (int k = 0; task < end; ++k, task += kProjV9Warps) {
    issue(task + kProjV9Warps, (k + 1) & 1);
    v9_shortcut_load<NT>(p, task, g, t, P, res);
    cp_async_wait<1>();
    __syncwarp();
    const __half* a_lo = mine + (k & 1) * task_halves + g * p.hidden + 4 * t;
    const __half* a_hi = a_lo + 8 * p.hidden;
    const __half* vb = task < boundary ? b_s : b_s1;  // the task's image's V'
#pragma unroll 3
    for (int u = 0; u < units; ++u)
      v9_unit_plain<NT>(acc, *reinterpret_cast<const uint2*>(a_lo + u * 16),
                        *reinterpret_cast<const uint2*>(a_hi + u * 16), vb, ldb, u, g, t);
    v9_epilogue<NT>(p, acc, bias, res, task, g, t, P);
    __syncwarp();  // every lane has read this slot before the copy issued next iteration refills it
  }
  cp_async_wait<0>();
}

namespace {

template <int NT>
cudaError_t launch_project_se_nt(const Params& p, cudaStream_t stream, bool pdl) {
  static DeviceSlots slots;
  const auto kernel = project_se_kernel<NT>;
  const int smem = project_se_smem_bytes(p.hidden, p.hid_pad, p.C_out, p.sq);
  int dev = 0;
  const cudaError_t err = prepare(kernel, slots, smem, kProjV9Threads, dev, true);
  if (err != cudaSuccess) return err;
  // as many CTAs as fit (at most one per 8 tasks), and at least one per image: a CTA's range spans <= 2 images
  const long long tasks = (long long)p.N * (p.Ho * p.Wo / 16);
  const int grid = (int)std::max<long long>(
      p.N, std::min<long long>((long long)slots.ctas_per_sm[dev] * slots.sms[dev], (tasks + kProjV9Warps - 1) / kProjV9Warps));
  if (pdl && pdl::device_supports(dev))
    return pdl::launch(kernel, dim3(grid), dim3(kProjV9Threads), smem, stream, p);
  kernel<<<grid, kProjV9Threads, smem, stream>>>(p);
  return cudaGetLastError();
}

bool project_se_requested() {  // "1": project_se (CUDA_KERNELS_PROJ_SE, read at every call)
  const char* v = std::getenv("CUDA_KERNELS_PROJ_SE");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace

// Where project_se replaces the SE kernel and project_v9s: version 11 with the switch on, wherever project_v9s would
// run (the loader switches at their defaults) and project_se's shared memory fits.
bool project_se_runs(const Params& p, int version) {
  const int nt = p.C_out / 8;
  return version == 11 && project_se_requested() && p.sq >= 1 && !project_wg_applies(p, project_wg_mode(true)) &&
         project_v9_applies(p.hidden, p.C_out) && project_v10_mode() != 2 && project_v9s_runs(p) &&
         !project_v9_bulk_requested() && !project_v9_runs_ring(p) && !project_v9sx_requested() &&
         !project_v9sr_requested() && (nt == 2 || nt == 3 || nt == 5 || nt == 6) &&
         project_se_smem_bytes(p.hidden, p.hid_pad, p.C_out, p.sq) <= kProjV9SMaxSmem;
}

cudaError_t launch_project_se(const Params& p, cudaStream_t stream, bool pdl) {
  switch (p.C_out / 8) {
    case 2: return launch_project_se_nt<2>(p, stream, pdl);
    case 3: return launch_project_se_nt<3>(p, stream, pdl);
    case 5: return launch_project_se_nt<5>(p, stream, pdl);
    case 6: return launch_project_se_nt<6>(p, stream, pdl);
    default: return cudaErrorInvalidValue;
  }
}
