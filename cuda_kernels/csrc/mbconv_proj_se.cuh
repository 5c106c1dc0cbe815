// project_se (CUDA_KERNELS_PROJ_SE=1, off until measured; NOTES.md "Current state", session 32): the SE inside the
// projection, the scale folded into V. Included by mbconv_v3.cu inside namespace mb, after project_v9's pieces
// (v9_prologue, v9_shortcut_load, v9_epilogue, launch_v9's helpers), which it reuses.
//
// Where project_v9s runs (H x W a multiple of 16: a task lies in one image), each CTA takes the tasks of one image
// (1/split of them, where the grid has room for split CTAs an image), so that one SE scale serves all its work:
// after the PDL wait it copies its warps' first D rows (they fly meanwhile) and computes the image's SE itself (pool
// of kernel 1's band sums, FC1, SiLU, FC2, sigmoid), then scales V's rows once, V'[c][h] = V[c][h] s[h] in fp16, in
// place. The unit loop is then LDS -> HMMA (project_v9s applies s to each A element in fp32: LDS, widen, multiply,
// pack). The SE kernel is not launched. Numerics: s V rounded to fp16 where project_v9s rounds s D (PyTorch's fp16
// block rounds s D too); the SE in fp32 as se_v3 computes it (FC1's sums in another order).
// LDSM (CUDA_KERNELS_PROJ_SE=2): A and V' by ldmatrix (one x4 for A and one per two n-tiles a unit, in mma's own k
// order) from rows padded to an odd multiple of 16 bytes (conflict-free), where the plain loads of project_v9s's
// permuted k order need the A registers moved into place (8 MOVs a unit): the ring's rows are hidden + 8 halves
// apart and V' gets its own buffer, round_up(C_out, 16) rows of round_up(hidden, 64) + 8.

// Shared memory: V (project_v9's, C_out rows of project_v9_ldb), the warps' two-task rings (rows project_se_apitch
// apart), LDSM's V' buffer, then pooled and the scale [hid_pad], squeezed, W1 and W2 (fp32).
__host__ __device__ constexpr int project_se_apitch(int hidden, bool ldsm) { return ldsm ? hidden + 8 : hidden; }
__host__ __device__ constexpr int project_se_vpitch(int hidden) { return round_up(hidden, 64) + 8; }
__host__ __device__ constexpr int project_se_vp_offset(int hidden, int c_out, bool ldsm) {
  return project_v9_smem_bytes(hidden, c_out) + kProjV9Warps * 2 * 16 * project_se_apitch(hidden, ldsm) * 2;
}
__host__ __device__ constexpr int project_se_float_offset(int hidden, int c_out, bool ldsm) {
  return project_se_vp_offset(hidden, c_out, ldsm) + (ldsm ? round_up(c_out, 16) * project_se_vpitch(hidden) * 2 : 0);
}
__host__ __device__ constexpr int project_se_smem_bytes(int hidden, int hid_pad, int c_out, int sq, bool ldsm) {
  return project_se_float_offset(hidden, c_out, ldsm) + (2 * hid_pad + round_up(sq, 4) + 2 * sq * hidden) * 4;
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

// One unit by ldmatrix (LDSM): a = the lane's A fragment address (row lane & 15, k half lane >> 4), b = its V' address
// (row (lane & 7) + 8 (lane >> 4), k half (lane >> 3) & 1), both at unit 0; V' rows vpitch halves apart.
template <int NT>
__device__ __forceinline__ void v9_unit_ldsm(float (&acc)[NT][4], uint32_t a_addr, uint32_t b_addr, int vpitch, int u) {
  uint32_t a[4];
  bf::ldmatrix_x4(a, a_addr + u * 32);
#pragma unroll
  for (int np = 0; np < (NT + 1) / 2; ++np) {
    uint32_t b[4];
    bf::ldmatrix_x4(b, b_addr + np * 16 * vpitch * 2 + u * 32);
    mma_m16n8k16(acc[2 * np], a, b[0], b[1]);
    if (2 * np + 1 < NT) mma_m16n8k16(acc[2 * np + 1], a, b[2], b[3]);
  }
}

// Image n's SE scale into `scale` [hidden] (shared memory; W1 / W2 there already), every thread of the CTA.
__device__ __forceinline__ void project_se_scale(const Params& p, int n, float* pooled, float* squeezed, float* scale,
                                                 const float* w1s, const float* w2s, int tid, int lane, int warp) {
  const float inv = 1.f / float(p.Ho * p.Wo);
  for (int c = tid; c < p.hidden; c += kProjV9Threads) {
    float s = 0.f;
    for (int b = 0; b < p.row_blocks; ++b) s += p.partial[((size_t)n * p.row_blocks + b) * p.hid_pad + c];
    pooled[c] = s * inv;
  }
  __syncthreads();
  for (int j = warp; j < p.sq; j += kProjV9Warps) {  // FC1: a warp a row, the lanes across the hidden channels
    float s = 0.f;
    for (int c = lane; c < p.hidden; c += 32) s = fmaf(w1s[j * p.hidden + c], pooled[c], s);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) {
      const float v = s + p.b_se1[j];
      squeezed[j] = v / (1.f + expf(-v));
    }
  }
  __syncthreads();
  for (int c = tid; c < p.hidden; c += kProjV9Threads) {  // FC2: a thread a channel
    float s = p.b_se2[c];
    for (int j = 0; j < p.sq; ++j) s = fmaf(w2s[c * p.sq + j], squeezed[j], s);
    scale[c] = 1.f / (1.f + expf(-s));
  }
  __syncthreads();
}

template <int NT, bool LDSM>
__global__ void __launch_bounds__(kProjV9Threads) project_se_kernel(const Params p, int split) {
  extern __shared__ __align__(16) uint8_t smem_se[];
  __half* b_s = reinterpret_cast<__half*>(smem_se);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int ldb = project_v9_ldb(p.hidden), apitch = project_se_apitch(p.hidden, LDSM), slot_halves = 16 * apitch;
  const int vpitch = project_se_vpitch(p.hidden);
  __half* mine = reinterpret_cast<__half*>(smem_se + project_v9_smem_bytes(p.hidden, p.C_out)) + warp * 2 * slot_halves;
  __half* vp = reinterpret_cast<__half*>(smem_se + project_se_vp_offset(p.hidden, p.C_out, LDSM));  // LDSM's V'
  float* pooled = reinterpret_cast<float*>(smem_se + project_se_float_offset(p.hidden, p.C_out, LDSM));
  float* scale = pooled + p.hid_pad;
  float* squeezed = scale + p.hid_pad;
  float* w1s = squeezed + round_up(p.sq, 4);  // W1 [sq][hidden], then W2 [hidden][sq]
  float* w2s = w1s + p.sq * p.hidden;
  // the SE's weights (one cp.async group; they do not depend on kernel 1), then V, the biases and the PDL wait
  for (int i = tid; i < p.sq * p.hidden / 4; i += kProjV9Threads) {
    cp_async16(smem_addr(w1s + 4 * i), p.w_se1 + 4 * i, true);
    cp_async16(smem_addr(w2s + 4 * i), p.w_se2 + 4 * i, true);
  }
  bf::cp_async_commit();
  float2 bias[NT];
  v9_prologue<NT>(p, b_s, ldb, bias, tid, t);

  const int n = (int)blockIdx.x / split, part = (int)blockIdx.x - n * split;
  const int hw = p.Ho * p.Wo, P = p.N * hw, last = (n + 1) * (hw / 16), units = p.hidden / 16;
  const int step = split * kProjV9Warps;
  int task = n * (hw / 16) + part * kProjV9Warps + warp;
  auto issue = [&](int tk, int slot) {  // the task's 16 rows of D into the warp's slot; a group per call
    if (tk < last) {
      const __half* src = p.d + (size_t)tk * 16 * p.hidden;
      const uint32_t dst = smem_addr(mine + slot * slot_halves);
      if constexpr (LDSM) {  // piece i in row i / (hidden / 8): 16 bytes further a row (the pad); the quotient
        // by a multiply-high with ceil(2^32 / (hidden / 8)), exact for i < 2^32 / hidden
        const uint32_t magic = 0xffffffffu / (uint32_t)(p.hidden / 8) + 1u;
        for (int i = lane; i < 2 * p.hidden; i += 32)
          cp_async16(dst + (i + __umulhi((uint32_t)i, magic)) * 16, src + i * 8, true);
      } else {
        for (int i = lane; i < 2 * p.hidden; i += 32) cp_async16(dst + i * 16, src + i * 8, true);
      }
    }
    bf::cp_async_commit();
  };
  issue(task, 0);      // the first rows fly while the SE runs
  cp_async_wait<1>();  // this thread's W1 / W2 copies (project_se_scale's first barrier makes them everyone's)
  project_se_scale(p, n, pooled, squeezed, scale, w1s, w2s, tid, lane, warp);
  for (int i = tid; i < p.C_out * (p.hidden / 2); i += kProjV9Threads) {  // V' = V diag(s)
    const int r = i / (p.hidden / 2), c = 2 * (i - r * (p.hidden / 2));
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(b_s + r * ldb + c));
    *reinterpret_cast<__half2*>((LDSM ? vp + r * vpitch : b_s + r * ldb) + c) =
        __floats2half2_rn(f.x * scale[c], f.y * scale[c + 1]);
  }
  if constexpr (LDSM) {  // the rows past C_out that the last x4 of an odd NT reads (never multiplied)
    const int pad = (round_up(p.C_out, 16) - p.C_out) * vpitch / 2;
    for (int i = tid; i < pad; i += kProjV9Threads)
      reinterpret_cast<uint32_t*>(vp + p.C_out * vpitch)[i] = 0u;
  }
  __syncthreads();

  uint32_t res[2][NT];
  float acc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
  const uint32_t b_addr =
      smem_addr(vp) + (((lane & 7) + ((lane >> 4) << 3)) * vpitch + ((lane >> 3) & 1) * 8) * 2;  // LDSM
  for (int k = 0; task < last; ++k, task += step) {
    issue(task + step, (k + 1) & 1);
    v9_shortcut_load<NT>(p, task, g, t, P, res);
    cp_async_wait<1>();
    __syncwarp();
    if constexpr (LDSM) {
      const uint32_t a_addr = smem_addr(mine + (k & 1) * slot_halves) + ((lane & 15) * apitch + (lane >> 4) * 8) * 2;
#pragma unroll 3
      for (int u = 0; u < units; ++u) v9_unit_ldsm<NT>(acc, a_addr, b_addr, vpitch, u);
    } else {
      const __half* a_lo = mine + (k & 1) * slot_halves + g * p.hidden + 4 * t;
      const __half* a_hi = a_lo + 8 * p.hidden;
#pragma unroll 3
      for (int u = 0; u < units; ++u)
        v9_unit_plain<NT>(acc, *reinterpret_cast<const uint2*>(a_lo + u * 16),
                          *reinterpret_cast<const uint2*>(a_hi + u * 16), b_s, ldb, u, g, t);
    }
    v9_epilogue<NT>(p, acc, bias, res, task, g, t, P);
    __syncwarp();  // every lane has read this slot before the copy issued next iteration refills it
  }
  cp_async_wait<0>();
}

namespace {

template <int NT, bool LDSM>
cudaError_t launch_project_se_nt(const Params& p, cudaStream_t stream, bool pdl) {
  static DeviceSlots slots;
  const auto kernel = project_se_kernel<NT, LDSM>;
  const int smem = project_se_smem_bytes(p.hidden, p.hid_pad, p.C_out, p.sq, LDSM);
  int dev = 0;
  const cudaError_t err = prepare(kernel, slots, smem, kProjV9Threads, dev, true);
  if (err != cudaSuccess) return err;
  // split CTAs an image where the grid has room (2.x at batch 128: two CTAs an SM), at most one per 8 tasks
  const int tasks = p.Ho * p.Wo / 16, room = slots.ctas_per_sm[dev] * slots.sms[dev] / p.N;
  const int split = std::max(1, std::min(room, (tasks + kProjV9Warps - 1) / kProjV9Warps));
  if (pdl && pdl::device_supports(dev))
    return pdl::launch(kernel, dim3(p.N * split), dim3(kProjV9Threads), smem, stream, p, split);
  kernel<<<p.N * split, kProjV9Threads, smem, stream>>>(p, split);
  return cudaGetLastError();
}

template <bool LDSM>
cudaError_t launch_project_se_ldsm(const Params& p, cudaStream_t stream, bool pdl) {
  switch (p.C_out / 8) {
    case 2: return launch_project_se_nt<2, LDSM>(p, stream, pdl);
    case 3: return launch_project_se_nt<3, LDSM>(p, stream, pdl);
    case 5: return launch_project_se_nt<5, LDSM>(p, stream, pdl);
    case 6: return launch_project_se_nt<6, LDSM>(p, stream, pdl);
    default: return cudaErrorInvalidValue;
  }
}

// CUDA_KERNELS_PROJ_SE (read at every call): "1" project_se, "2" with LDSM; off otherwise
int project_se_mode() {
  const char* v = std::getenv("CUDA_KERNELS_PROJ_SE");
  if (v == nullptr) return 0;
  return std::strcmp(v, "1") == 0 ? 1 : std::strcmp(v, "2") == 0 ? 2 : 0;
}

}  // namespace

// Where project_se replaces the SE kernel and project_v9s: version 11 with the switch on, wherever project_v9s would
// run (the loader switches at their defaults) and project_se's shared memory fits.
bool project_se_runs(const Params& p, int version) {
  const int nt = p.C_out / 8, mode = project_se_mode();
  return version == 11 && mode != 0 && p.sq >= 1 && !project_wg_applies(p, project_wg_mode(true)) &&
         project_v9_applies(p.hidden, p.C_out) && project_v10_mode() != 2 && project_v9s_runs(p) &&
         !project_v9_bulk_requested() && !project_v9_runs_ring(p) && !project_v9sx_requested() &&
         !project_v9sr_requested() && (nt == 2 || nt == 3 || nt == 5 || nt == 6) &&
         project_se_smem_bytes(p.hidden, p.hid_pad, p.C_out, p.sq, mode == 2) <= kProjV9SMaxSmem;
}

cudaError_t launch_project_se(const Params& p, cudaStream_t stream, bool pdl) {
  return project_se_mode() == 2 ? launch_project_se_ldsm<true>(p, stream, pdl)
                                : launch_project_se_ldsm<false>(p, stream, pdl);
}
