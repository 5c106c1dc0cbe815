// Kernel 1 of the MBConv block with a producer and consumers (NOTES.md, "Design sketch: kernel 1 with a producer and
// consumers"; CUDA_KERNELS_K1_V12=1, off by default until measured): version 8's arithmetic (mbconv_v8.cuh: the
// expand on mma.sync from X and U, its SiLU epilogue into the E tile, the depthwise in HFMA2 over version 8's
// segments, the pool per item), reorganised so that an item's expand overlaps the previous item's depthwise:
//   warps 0-3 (the producer): X by bulk copy, U by cp.async, the expand into E buffer j % 2 of the CTA's j-th item,
//     then one arrival each on full[j % 2]; before writing a buffer again, a wait on empty[j % 2];
//   warps 4-11 (the consumers): a wait on full[j % 2], the depthwise from that buffer (D stored, the per-group sums
//     into red[j % 2]), a named barrier among the consumers, the pool's sums to partial, one arrival each on
//     empty[j % 2].
// No CTA barrier inside the item loop. Built where a band is the whole image (row_blocks == 1: the padding rows of E
// are the same for every item, written once per CTA), stride 1, k = 5, one image per item, chunks of 48 (B0's
// features.6.1-6.3); every D value and every pool sum is formed as version 8's one-image kernel forms it, so the
// block's output is its bit for bit. cuda_kernels/mbconv.py mirrors the rule and the shared memory.
// Included by mbconv_v8.cuh after the definitions it uses (V8Dw, V8Seg, V8Item, x_halves_v8, expand_k16,
// kernel1_switch, ...), before version 8's dispatch, which launches it.
#pragma once

namespace mb {

constexpr int kV12Threads = 384, kV12Producers = 128, kV12Consumers = 256;
constexpr int kV12TwoCtaSmem = 113 * 1024;
// Two CTAs of 384 threads per SM start at 80 registers each (65,536 / 768, in steps of 8); the producer warpgroup
// gives some back and the consumers take them (setmaxnreg, sm_90a): 128 x 64 + 256 x 88 = 384 x 80.
constexpr int kV12ProducerRegs = 64, kV12ConsumerRegs = 88;
static_assert(kV12Producers * kV12ProducerRegs + kV12Consumers * kV12ConsumerRegs <= kV12Threads * 80, "registers");

// X (version 8's layout), U, two E tiles, two sets of per-group sums, the chunk's taps (half2) and bias (float2),
// 5 mbarriers (X, full x 2, empty x 2).
__host__ __device__ inline int expand_dw_v12_smem_bytes(int H, int W, int ks, int C_in, int k_pad) {
  const int e_rows = H + ks - 1, we = (round_up(W, 4) - 1) + ks, m_pad = round_up(H * W, 16);
  return x_halves_v8(m_pad, C_in, k_pad) * 2 + 48 * (k_pad + 8) * 2 + 2 * e_rows * we * 60 * 2 +
         2 * (kV12Consumers / 24) * 48 * 4 + ks * ks * 24 * 4 + 24 * 8 + 5 * 8;
}

__host__ __device__ inline bool kernel1_v12(bool requested, int row_blocks, int H, int W, int ks, int stride, int C_in,
                                            int k_pad, bool hf) {
  return requested && hf && ks == 5 && stride == 1 && row_blocks == 1 &&
         expand_dw_v12_smem_bytes(H, W, ks, C_in, k_pad) <= kV12TwoCtaSmem;
}

template <int KS>
__global__ void __launch_bounds__(kV12Threads, 2) expand_dw_v12_kernel(const Params p) {
  using bf::cp_async16;
  using bf::smem_addr;
  constexpr int HC = 48, LDE = V8Dw<HC>::LDE, PAD = KS / 2, OW = 4, IN = OW - 1 + KS, ECH = HC / 4;
  constexpr int R = V8Seg<KS>::R, SEG_E = R - 1 + KS, NT = HC / 8, KK = KS * KS;
  constexpr int PAIRS = HC / 2, GROUPS = kV12Consumers / PAIRS;  // version 8's depthwise partition
  extern __shared__ __align__(16) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int total = p.hid_pad / HC * p.N;  // items (chunk, image), chunk-major: V8Item with one band
  const int i_begin = (int)((long long)blockIdx.x * total / gridDim.x);
  const int i_end = (int)((long long)(blockIdx.x + 1) * total / gridDim.x);
  const int ngroups = (p.Wo + OW - 1) / OW, WE = (ngroups * OW - 1) + KS, e_rows = p.H + KS - 1;
  const int e_tile = e_rows * WE, npix = p.H * p.W, m_pad = round_up(npix, 16);
  const bool x_padded = x_padded_v8(p.C_in);
  const int x_halves = x_halves_v8(m_pad, p.C_in, p.k_pad), ldx = x_padded ? p.k_pad + 8 : p.C_in;
  const int ldu = p.k_pad + 8;
  // the buffers, formed from the shared array's address where they are used (pointers held across the roles' loops
  // cost two registers each: ptxas spilled at the 80 registers of two CTAs per SM)
  auto Xs = [&] { return reinterpret_cast<__half*>(smem); };
  auto Us = [&] { return reinterpret_cast<__half*>(smem) + x_halves; };
  auto Eb = [&](int b) { return reinterpret_cast<__half*>(smem) + x_halves + HC * ldu + b * e_tile * LDE; };
  auto redb = [&](int b) { return reinterpret_cast<float*>(Eb(2)) + b * GROUPS * HC; };
  auto wdh = [&] { return reinterpret_cast<__half2*>(redb(2)); };                   // the chunk's taps [KK][PAIRS]
  auto wdb = [&] { return reinterpret_cast<float2*>(wdh() + KK * PAIRS); };          // its bias [PAIRS]
  auto xbar = [&] { return smem_addr(wdb() + PAIRS); };  // then full[2], empty[2]
  auto full = [&](int b) { return xbar() + 8 + 8 * b; };
  auto empty = [&](int b) { return xbar() + 24 + 8 * b; };

  // Once per CTA: X zeroed (every value the expand reads is finite), both E tiles' borders (the padding rows above
  // and below the image and the side columns: the expand writes the interior only, the same for every item), the
  // mbarriers.
  for (int i = tid; i < x_halves / 8; i += kV12Threads) reinterpret_cast<uint4*>(Xs())[i] = make_uint4(0, 0, 0, 0);
  for (int i = tid; i < 2 * e_tile * ECH; i += kV12Threads) {
    const int px = i / ECH, c = i - px * ECH, t = px % e_tile, row = t / WE, col = t - row * WE;
    if (row < PAD || row >= PAD + p.H || col < PAD || col >= PAD + p.W)
      *reinterpret_cast<uint2*>(Eb(0) + px * LDE + c * 4) = make_uint2(0, 0);
  }
  if (tid == 0) {
    bf::mbar_init(xbar(), 1);
    for (int b = 0; b < 2; ++b) {
      bf::mbar_init(full(b), kV12Producers);
      bf::mbar_init(empty(b), kV12Consumers);
    }
    bf::fence_barrier_init();
  }
  bf::fence_proxy_async_smem();  // the zeros of X before the bulk copies into it
  __syncthreads();
  pdl::wait();
  pdl::launch_dependents();
  if (i_begin >= i_end) return;

  if (warp < kV12Producers / 32) {
    // ---- the producer ----
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    bf::setmaxnreg_dec<kV12ProducerRegs>();  // the expand needs fewer registers than the depthwise
#endif
    auto issue_x = [&](int i) {  // image n's X: one bulk copy (dense rows) or one per pixel (padded rows)
      const V8Item it(i, p.N, 1);
      const __half* src = p.x + (size_t)it.n * npix * p.C_in;
      if (tid == 0) {
        bf::mbar_arrive_expect_tx(xbar(), (uint32_t)(npix * p.C_in * 2));
        if (!x_padded) bf::bulk_copy_g2s(smem_addr(Xs()), src, (uint32_t)(npix * p.C_in * 2), xbar());
      }
      if (x_padded)
        for (int q = tid; q < npix; q += kV12Producers)
          bf::bulk_copy_g2s(smem_addr(Xs() + q * ldx), src + (size_t)q * p.C_in, (uint32_t)(p.C_in * 2), xbar());
    };
    auto issue_u = [&](int c0) {  // the chunk's U rows (version 3's padded layout), one commit group
      const int kch = p.k_pad / 8;
      const float inv_kch = 1.f / kch;
      const __half* usrc = p.w_exp + (size_t)c0 * p.k_pad;
      for (int i = tid; i < HC * kch; i += kV12Producers) {
        const int r = div_small(i, inv_kch), c = i - r * kch;
        cp_async16(smem_addr(Us() + r * ldu + c * 8), usrc + (size_t)r * p.k_pad + c * 8, true);
      }
      bf::cp_async_commit();
    };
    issue_x(i_begin);
    issue_u(V8Item(i_begin, p.N, 1).chunk * HC);
    uint32_t xphase = 0;
    const float inv_w = 1.f / p.W;
    const int a_row = lane & 15, a_k = (lane >> 4) * 8;
    const int b_row = (lane & 7) + ((lane >> 4) << 3), b_k = ((lane >> 3) & 1) * 8;
    const int mtiles = m_pad / 16, e_off = PAD * WE + PAD;  // E position of the image's first pixel
    for (int i = i_begin; i < i_end; ++i) {
      const int j = i - i_begin, b = j & 1;
      const V8Item it(i, p.N, 1);
      const int c0 = it.chunk * HC;
      if (j >= 2) bf::mbar_wait(empty(b), ((j >> 1) - 1) & 1);  // the consumers are done with item j - 2
      bf::cp_async_wait<0>();  // U of a new chunk (an empty wait otherwise)
      bf::mbar_wait(xbar(), xphase);
      xphase ^= 1;
      bf::named_barrier_sync(1, kV12Producers);  // every producer thread's U copies visible
      __half* Es = Eb(b);
      float hbias[NT][2];  // this lane's expand biases, halved
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int u = 0; u < 2; ++u) hbias[nt][u] = 0.5f * __ldg(p.b_exp + c0 + nt * 8 + (lane & 3) * 2 + u);
      for (int mt = warp; mt < mtiles; mt += kV12Producers / 32) {
        float acc[NT][4];
#pragma unroll
        for (int a = 0; a < NT; ++a)
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[a][c] = 0.f;
#pragma unroll 1
        for (int k0 = 0; k0 < p.k_pad; k0 += 16) expand_k16<HC>(acc, Xs(), ldx, Us(), ldu, mt * 16, k0, a_row, a_k, b_row, b_k);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int q = mt * 16 + (lane >> 2) + h * 8;
          if (q >= npix) continue;
          const int row = div_small(q, inv_w);
          __half* ep = Es + (e_off + row * WE + (q - row * p.W)) * LDE + (lane & 3) * 2;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            *reinterpret_cast<__half2*>(ep + nt * 8) =
                __floats2half2_rn(silu_of_half(fmaf(acc[nt][2 * h], 0.5f, hbias[nt][0])),
                                  silu_of_half(fmaf(acc[nt][2 * h + 1], 0.5f, hbias[nt][1])));
        }
      }
      bf::named_barrier_sync(1, kV12Producers);  // X and U read by every producer warp
      bf::mbar_arrive(full(b));                  // E buffer b complete (release: the consumers' wait acquires)
      if (i + 1 < i_end) {
        issue_x(i + 1);
        const int next_chunk = V8Item(i + 1, p.N, 1).chunk;
        if (next_chunk != it.chunk) issue_u(next_chunk * HC);
      }
    }
    return;
  }

  // ---- the consumers: thread ctid of 256, version 8's (pair, group) ----
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  bf::setmaxnreg_inc<kV12ConsumerRegs>();
#endif
  const int ctid = tid - kV12Producers, pair = ctid % PAIRS, group = ctid / PAIRS;
  int chunk = -1;
  const int rows = p.Ho, nseg = (rows + R - 1) / R, items = nseg * ngroups;
  const int dq = GROUPS / ngroups, dr = GROUPS - dq * ngroups;
  for (int i = i_begin; i < i_end; ++i) {
    const int j = i - i_begin, b = j & 1;
    const V8Item it(i, p.N, 1);
    const int c0 = it.chunk * HC, ch = c0 + 2 * pair;
    if (it.chunk != chunk) {  // a new chunk (the same item for every consumer): its taps and bias into wdw
      chunk = it.chunk;       // (the other consumers read the old ones before the previous item's named barrier)
      for (int q = ctid; q < (KK + 1) * PAIRS; q += kV12Consumers) {
        const int t = q / PAIRS, c = c0 + 2 * (q - t * PAIRS);
        if (t < KK)  // the taps halved (exact) as half2, version 8's HF values
          wdh()[q] = __floats2half2_rn(0.5f * __ldg(p.w_dw + (size_t)t * p.hid_pad + c),
                                       0.5f * __ldg(p.w_dw + (size_t)t * p.hid_pad + c + 1));
        else
          wdb()[q - KK * PAIRS] = make_float2(0.5f * __ldg(p.b_dw + c), 0.5f * __ldg(p.b_dw + c + 1));
      }
      bf::named_barrier_sync(2, kV12Consumers);
    }
    // the taps from shared memory each item (from global, or held across the items' waits, they made ptxas spill
    // at the 88 registers the consumers have)
    __half2 wh[KK];
#pragma unroll
    for (int t = 0; t < KK; ++t) wh[t] = wdh()[t * PAIRS + pair];
    const float2 db = wdb()[pair];
    const float dbias0 = db.x, dbias1 = db.y;
    bf::mbar_wait(full(b), (j >> 1) & 1);
    const __half* Es = Eb(b);
    float* red = redb(b);
    if (group < GROUPS) {  // version 8's depthwise (HF, one image, one band), its order of taps and sums
      const bool store = ch < p.hidden;
      float sum0 = 0.f, sum1 = 0.f;
      int seg = group / ngroups, og = group - seg * ngroups;
      for (int k = group; k < items; k += GROUPS) {
        const int orow0 = seg * R, ow0 = og * OW;
        seg += dq;
        og += dr;
        if (og >= ngroups) {
          og -= ngroups;
          ++seg;
        }
        const int valid_rows = min(R, rows - orow0), e_last = (valid_rows - 1) + KS - 1;
        const int valid = min(OW, p.Wo - ow0);
        const __half* ebase = Es + (orow0 * WE + ow0) * LDE + 2 * pair;
        const int d0 = ((it.n * p.Ho + orow0) * p.Wo + ow0) * p.hidden + ch;
        __half2 acch[R][OW];
#pragma unroll
        for (int er = 0; er < SEG_E; ++er) {
          const __half* erow = ebase + min(er, e_last) * WE * LDE;
          __half2 eh[IN];
#pragma unroll
          for (int x = 0; x < IN; ++x) eh[x] = *reinterpret_cast<const __half2*>(erow + x * LDE);
#pragma unroll
          for (int o = 0; o < R; ++o) {
            const int dy = er - o;
            if (dy < 0 || dy >= KS) continue;
            if (dy == 0)
#pragma unroll
              for (int u = 0; u < OW; ++u) acch[o][u] = __float2half2_rn(0.f);
#pragma unroll
            for (int u = 0; u < OW; ++u)
#pragma unroll
              for (int dx = 0; dx < KS; ++dx) acch[o][u] = __hfma2(eh[u + dx], wh[dy * KS + dx], acch[o][u]);
            if (dy == KS - 1 && o < valid_rows) {
              int dofs = d0 + o * p.Wo * p.hidden;
#pragma unroll
              for (int u = 0; u < OW; ++u) {
                if (valid < OW && u >= valid) break;
                const float2 f = __half22float2(acch[o][u]);
                const float s0 = silu_of_half(f.x + dbias0), s1 = silu_of_half(f.y + dbias1);
                if (store) *reinterpret_cast<__half2*>(p.d + dofs) = __floats2half2_rn(s0, s1);
                dofs += p.hidden;
                sum0 += s0;
                sum1 += s1;
              }
            }
          }
        }
      }
      *reinterpret_cast<float2*>(red + group * HC + 2 * pair) = make_float2(sum0, sum1);
    }
    bf::named_barrier_sync(2, kV12Consumers);  // every group's sums in red
    if (ctid < HC) {  // version 8's pool_store: the groups' sums in group order
      float s = 0.f;
#pragma unroll
      for (int g = 0; g < GROUPS; ++g) s += red[g * HC + ctid];
      p.partial[(size_t)it.n * p.hid_pad + c0 + ctid] = s;
    }
    bf::mbar_arrive(empty(b));  // E buffer b (and red b) free for item j + 2
  }
}

template <int KS>
cudaError_t launch_expand_dw_v12(const Params& p, cudaStream_t stream, bool pdl) {
  constexpr int kMaxDevices = 64;
  static int configured[kMaxDevices] = {}, last_smem[kMaxDevices] = {}, last_ctas[kMaxDevices] = {},
             sms[kMaxDevices] = {};
  const auto kernel = expand_dw_v12_kernel<KS>;
  const int smem = expand_dw_v12_smem_bytes(p.H, p.W, KS, p.C_in, p.k_pad);
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (p.row_blocks != 1 || p.stride != 1 || p.ksize != KS) return cudaErrorInvalidValue;
  if (smem > configured[dev]) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    configured[dev] = smem;
    last_smem[dev] = 0;
  }
  if (smem != last_smem[dev]) {
    err = cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return err;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&last_ctas[dev], kernel, kV12Threads, smem);
    if (err != cudaSuccess) return err;
    if (last_ctas[dev] < 1) return cudaErrorInvalidConfiguration;
    last_smem[dev] = smem;
  }
  const long long total = (long long)(p.hid_pad / 48) * p.N;
  if (total >= (1ll << 31)) return cudaErrorInvalidValue;
  const int grid = (int)std::min<long long>(total, (long long)last_ctas[dev] * sms[dev]);
  if (pdl && pdl::device_supports(dev))
    return pdl::launch(kernel, dim3(grid), dim3(kV12Threads), smem, stream, p);
  kernel<<<grid, kV12Threads, smem, stream>>>(p);
  return cudaGetLastError();
}

// CUDA_KERNELS_K1_V12=0|1 (read at every call; off by default until measured).
inline bool kernel1_v12_requested() {
  const char* v = kernel1_switch("CUDA_KERNELS_K1_V12");
  return v != nullptr && v[0] == '1';
}

}  // namespace mb
