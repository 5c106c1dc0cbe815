// Kernel 1 split by role instead of by phase (CUDA_KERNELS_K1_PC=1, off until measured; NOTES.md "Current state",
// next 3): one CTA of 512 threads an SM, whose first 4 warps (the producers) run each item's expand into one of two E
// tiles while the other 12 (the consumers, 16 thread groups of 24) run the previous item's depthwise, D's epilogue and
// the pool from the other tile. Two mbarriers a tile (full: the producers' 128 arrivals; empty: the consumers' 384)
// replace the CTA barriers A and B of expand_dw_v8_body; X is double-buffered as well, so that the producers copy item
// i + 2's band while they expand item i + 1. The split follows the work: at 3.1 an item's expand is ~1 / 3 of its
// depthwise (21-25 m-tiles of ~100 instructions a warp against 28-35 units of ~335 a thread group), so 4 warps expand
// while 12 run the depthwise, where today's two CTAs of 8 warps alternate both with ~60% of their time in the
// depthwise. Built for the U-in-registers static route (stride 1: B0's 2.1 and 3.1, B2's 3.1 / 3.2), whose arithmetic
// it repeats value for value: E and D are _dhurfws's bit for bit; the pool's fp32 sums add 16 thread groups' partial
// sums instead of 10, so the SE scale, and the output, differ in the last bits. At k = 3 (2.1) the default keeps the
// KH = 2 E rows that consecutive bands share (the halo); here every item expands all its band's rows (the E values
// are the same), which costs the producers 10 rows of expand for 8 of output - they have the slack.
//
// This is a second body beside expand_dw_v8_body, not a flag of it: moving the body's phases into shared helpers
// changed the SASS of most default kernel-1 functions (session 29, NOTES.md), which no device call has timed. The
// pieces repeated here (the item's band, the X copy, the expand's epilogue, the depthwise unit loop) are the _dhurfws
// paths of that body only; fold the two bodies together once this one is measured. Included by mbconv_v8.cuh inside
// namespace mb, after the version-8 kernels and before their launcher.

constexpr int kV8PcProducers = 128, kV8PcConsumers = 384;   // 4 warps, then 12
constexpr int kV8PcThreads = kV8PcProducers + kV8PcConsumers;

// Shared memory of the role-split kernel, in bytes from the start: X[0], X[1] (x_halves_v8 each), U (u_bytes_v8), E[0],
// E[1] (e_tile pixels at 60 halves each), the per-group sums of the consumers' thread groups twice (fp32), the taps as
// half2 [KK][PAIRS] and the fp32 bias [PAIRS], six mbarriers (X full, E full, E empty, two each).
struct V8PcSmem {
  int x1, u, e, red, wdw, bar, end;
};
__host__ __device__ inline V8PcSmem v8_pc_smem(int m_pad, int C_in, int k_pad, int e_tile, int ks, int chunk) {
  V8PcSmem r;
  r.x1 = x_halves_v8(m_pad, C_in, k_pad) * 2;
  r.u = 2 * r.x1;
  r.e = r.u + u_bytes_v8(k_pad, chunk, false);
  r.red = r.e + 2 * e_tile * 60 * 2;
  r.wdw = r.red + 2 * (kV8PcConsumers / (chunk / 2)) * chunk * 4;
  r.bar = r.wdw + ks * ks * chunk * 2 + chunk * 4;
  r.end = r.bar + 6 * 8;
  return r;
}
__host__ __device__ inline int expand_dw_v8_pc_smem_bytes(int H, int W, int Wo, int rows, int ks, int C_in, int k_pad,
                                                         int chunk) {
  const int e_rows = (rows - 1) + ks, we = (round_up(Wo, 4) - 1) + ks;
  return v8_pc_smem(expand_dw_v8_m_pad(H, W, rows, ks, 1, 1), C_in, k_pad, e_rows * we, ks, chunk).end;
}

template <int HC, int KS, int UR, int SH>
__global__ void __launch_bounds__(kV8PcThreads, 1)
    expand_dw_v8_kernel_dhurfwsp(const Params p_in, const __grid_constant__ V8Div dv) {
  constexpr int S = 1;
  static_assert(SH > 0 && UR > 0, "the static U-in-registers entries");
  Params p = p_in;
  v8_static_params<KS, SH>(p);
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int LDE = V8Dw<HC>::LDE, PAD = KS / 2, OW = DwTile<S>::OW, IN = (OW - 1) * S + KS, ECH = HC / 4;
  constexpr int R = V8Seg<KS, S>::R, SEG_E = (R - 1) * S + KS, NT = HC / 8, KK = KS * KS;
  constexpr int PAIRS = V8Dw<HC>::PAIRS, GROUPS = kV8PcConsumers / PAIRS;  // 16 thread groups of 24 at HC = 48
  static_assert(kV8PcConsumers % PAIRS == 0, "whole thread groups");
  const bool consumer = threadIdx.x >= kV8PcProducers;
  const int tid = consumer ? threadIdx.x - kV8PcProducers : threadIdx.x, lane = tid & 31, warp = tid >> 5;  // by role
  const int bands = p.row_blocks, total = p.hid_pad / HC * p.N * bands;
  const int i_begin = (int)((long long)blockIdx.x * total / gridDim.x);
  const int i_end = dv.grid.div((int)((blockIdx.x + 1) * (uint32_t)total));
  auto item_at = [&](int i) { return V8Item(i, p.N, bands, dv.per_chunk, dv.bands); };
  const int ngroups = (p.Wo + OW - 1) / OW;
  const int WE = (ngroups * OW - 1) * S + KS;
  const int rows_max = (p.rows_per_tile - 1) * S + KS;
  const int m_pad = round_up(min(rows_max, p.H) * p.W, 16);
  const bool x_padded = x_padded_v8(p.C_in);
  const int e_tile = rows_max * WE;
  const V8PcSmem L = v8_pc_smem(m_pad, p.C_in, p.k_pad, e_tile, KS, HC);
  auto Xb = [&](int b) { return reinterpret_cast<__half*>(smem + b * L.x1); };
  const __half* Us = reinterpret_cast<const __half*>(smem + L.u);
  auto Eb = [&](int b) { return reinterpret_cast<__half*>(smem + L.e) + b * e_tile * LDE; };
  auto redb = [&](int b) { return reinterpret_cast<float*>(smem + L.red) + b * GROUPS * HC; };
  __half2* const wdh = reinterpret_cast<__half2*>(smem + L.wdw);  // the taps as half2 [KK][PAIRS], then the bias
  float2* const wdw_bias = reinterpret_cast<float2*>(wdh + KK * PAIRS);
  const uint32_t bars = bf::smem_addr(smem + L.bar);
  auto x_full = [&](int b) { return bars + 8 * b; };
  auto e_full = [&](int b) { return bars + 16 + 8 * b; };
  auto e_empty = [&](int b) { return bars + 32 + 8 * b; };
  const int ldx = x_padded ? p.k_pad + 8 : p.C_in, ldu = p.k_pad + 8;

  // Once per CTA: both X bands zeroed, both E tiles' side columns, the mbarriers.
  for (int i = threadIdx.x; i < L.u / 16; i += kV8PcThreads)
    reinterpret_cast<uint4*>(smem)[i] = make_uint4(0, 0, 0, 0);
  {
    const int side = WE - p.W, per_row = side * ECH;
    for (int i = threadIdx.x; i < 2 * rows_max * per_row; i += kV8PcThreads) {  // the two tiles' rows are consecutive
      const int r = i / per_row, rest = i - r * per_row;
      const int col = rest / ECH, c = rest - col * ECH;
      const int ec = col < PAD ? col : p.W + col;
      *reinterpret_cast<uint2*>(Eb(0) + (r * WE + ec) * LDE + c * 4) = make_uint2(0, 0);
    }
  }
  if (threadIdx.x == 0) {
    for (int b = 0; b < 2; ++b) {
      bf::mbar_init(x_full(b), 1);
      bf::mbar_init(e_full(b), kV8PcProducers);
      bf::mbar_init(e_empty(b), kV8PcConsumers);
    }
    bf::fence_barrier_init();
  }
  bf::fence_proxy_async_smem();  // the zeros of X before the bulk copies into it
  __syncthreads();
  pdl::wait();
  pdl::launch_dependents();
  if (i_begin >= i_end) return;

  // The band of item i (expand_dw_v8_body's band_rows_of, no halo)
  struct Band {
    int oh0, oh1, r0, e_rows, ih_lo, ih_hi, npix;
  };
  auto band_of = [&](const V8Item& it) {
    Band g;
    g.oh0 = it.band * p.rows_per_tile;
    g.oh1 = min(g.oh0 + p.rows_per_tile, p.Ho);
    g.r0 = g.oh0 * S - PAD;
    g.e_rows = (g.oh1 - g.oh0 - 1) * S + KS;
    g.ih_lo = max(0, g.r0);
    g.ih_hi = min(p.H - 1, g.r0 + g.e_rows - 1);
    g.npix = max(0, g.ih_hi - g.ih_lo + 1) * p.W;
    return g;
  };

  if (!consumer) {  // ---- producers: X copies, U, the expand ----
    auto issue_x = [&](int i, int b) {  // one bulk copy by thread 0 (dense rows) or one per pixel (padded rows)
      const V8Item it = item_at(i);
      const Band g = band_of(it);
      const __half* src = p.x + ((size_t)it.n * p.H + g.ih_lo) * p.W * p.C_in;
      const uint32_t bytes = (uint32_t)(g.npix * p.C_in * 2), row_bytes = (uint32_t)(p.C_in * 2);
      if (tid == 0) {
        bf::mbar_arrive_expect_tx(x_full(b), bytes);
        if (!x_padded && g.npix > 0) bf::bulk_copy_g2s(bf::smem_addr(Xb(b)), src, bytes, x_full(b));
      }
      if (x_padded)
        for (int q = tid; q < g.npix; q += kV8PcProducers)
          bf::bulk_copy_g2s(bf::smem_addr(Xb(b) + q * ldx), src + (size_t)q * p.C_in, row_bytes, x_full(b));
    };
    auto issue_u = [&](int c0) {  // U's chunk rows (version 3's padded layout), one commit group
      const int kch = p.k_pad / 8;
      const float inv_kch = 1.f / kch;
      const __half* usrc = p.w_exp + (size_t)c0 * p.k_pad;
      for (int i = tid; i < HC * kch; i += kV8PcProducers) {
        const int r = div_small(i, inv_kch), c = i - r * kch;
        bf::cp_async16(bf::smem_addr(Us + r * ldu + c * 8), usrc + (size_t)r * p.k_pad + c * 8, true);
      }
      bf::cp_async_commit();
    };
    issue_x(i_begin, 0);
    if (i_begin + 1 < i_end) issue_x(i_begin + 1, 1);
    issue_u(item_at(i_begin).chunk * HC);
    const int a_row = lane & 15, a_k = (lane >> 4) * 8;
    const int b_row = (lane & 7) + ((lane >> 4) << 3), b_k = ((lane >> 3) & 1) * 8;
    const float inv_w = 1.f / p.W;
    for (int i = i_begin, k = 0; i < i_end; ++i, ++k) {
      const int b = k & 1;
      const uint32_t parity = (k >> 1) & 1;
      const V8Item it = item_at(i);
      const Band g = band_of(it);
      const int c0 = it.chunk * HC;
      if (i == i_begin || (it.n == 0 && it.band == 0)) {  // a new chunk's U (issued after the previous expand)
        bf::cp_async_wait<0>();
        bf::named_barrier_sync(1, kV8PcProducers);
      }
      bf::mbar_wait(x_full(b), parity);
      bf::mbar_wait(e_empty(b), parity ^ 1);  // the consumers are done with item i - 2's E
      __half* const E = Eb(b);
      const __half* const X = Xb(b);
      {  // E rows above / below the image (whole rows, at the top and bottom bands only)
        const int in_lo = g.ih_lo - g.r0, in_hi = g.ih_hi - g.r0;
        const int top = in_lo * WE * ECH, bottom0 = (in_hi + 1) * WE * ECH, bottom = g.e_rows * WE * ECH - bottom0;
        for (int j0 = tid; j0 < top + bottom; j0 += kV8PcProducers) {
          const int j = j0 < top ? j0 : bottom0 + j0 - top;
          const int e = j / ECH, c = j - e * ECH;
          *reinterpret_cast<uint2*>(E + e * LDE + c * 4) = make_uint2(0, 0);
        }
      }
      // E = SiLU(X U^T + a), U's fragments in registers (expand_dw_v8_body's UR path and store_tile)
      float hbias[NT][2];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int u = 0; u < 2; ++u) hbias[nt][u] = 0.5f * __ldg(p.b_exp + c0 + nt * 8 + (lane & 3) * 2 + u);
      uint32_t ub[UR][HC / 16][4];
#pragma unroll
      for (int ks = 0; ks < UR; ++ks)
#pragma unroll
        for (int np = 0; np < HC / 16; ++np)
          bf::ldmatrix_x4(ub[ks][np], bf::smem_addr(Us + (np * 16 + b_row) * ldu + ks * 16 + b_k));
      const int e_off = (g.ih_lo - g.r0) * WE + PAD, mtiles = (g.npix + 15) / 16;
      for (int mt = warp; mt < mtiles; mt += kV8PcProducers / 32) {
        float acc[NT][4];
        zero_acc(acc);
#pragma unroll
        for (int ks = 0; ks < UR; ++ks) {
          uint32_t a[4];
          bf::ldmatrix_x4(a, bf::smem_addr(X + (mt * 16 + a_row) * ldx + ks * 16 + a_k));
#pragma unroll
          for (int np = 0; np < HC / 16; ++np) {
            bf::mma_m16n8k16(acc[2 * np], a, ub[ks][np][0], ub[ks][np][1]);
            bf::mma_m16n8k16(acc[2 * np + 1], a, ub[ks][np][2], ub[ks][np][3]);
          }
        }
        const int left = g.npix - mt * 16;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int q = mt * 16 + (lane >> 2) + h * 8, row = div_small(q, inv_w);
          if ((lane >> 2) + h * 8 >= left) continue;
          __half* const ep = E + (e_off + row * WE + (q - row * p.W)) * LDE + (lane & 3) * 2;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            *reinterpret_cast<__half2*>(ep + nt * 8) =
                __floats2half2_rn(silu_of_half(fmaf(acc[nt][2 * h], 0.5f, hbias[nt][0])),
                                  silu_of_half(fmaf(acc[nt][2 * h + 1], 0.5f, hbias[nt][1])));
        }
      }
      bf::mbar_arrive(e_full(b));  // this thread's E values (release)
      bf::named_barrier_sync(1, kV8PcProducers);  // every producer done reading X[b] and U
      if (i + 2 < i_end) issue_x(i + 2, b);
      if (i + 1 < i_end && item_at(i + 1).chunk != it.chunk) issue_u(item_at(i + 1).chunk * HC);
    }
    return;
  }

  // ---- consumers: the depthwise, D's epilogue in packed fp16, the pool's sums ----
  const int pair = tid % PAIRS, group = tid / PAIRS;
  for (int i = i_begin, k = 0; i < i_end; ++i, ++k) {
    const int b = k & 1;
    const V8Item it = item_at(i);
    const Band g = band_of(it);
    const int c0 = it.chunk * HC;
    if (i == i_begin || (it.n == 0 && it.band == 0)) {  // a new chunk's taps and bias, halved (version 3's values)
      for (int j = tid; j < (KK + 1) * PAIRS; j += kV8PcConsumers) {
        const int t = j / PAIRS, ch = c0 + 2 * (j - t * PAIRS);
        const float* src = t < KK ? p.w_dw + (size_t)t * p.hid_pad + ch : p.b_dw + ch;
        if (t < KK)
          wdh[j] = __floats2half2_rn(0.5f * __ldg(src), 0.5f * __ldg(src + 1));
        else
          wdw_bias[j - KK * PAIRS] = make_float2(0.5f * __ldg(src), 0.5f * __ldg(src + 1));
      }
      bf::named_barrier_sync(2, kV8PcConsumers);
    }
    bf::mbar_wait(e_full(b), (k >> 1) & 1);
    const __half* const E = Eb(b);
    float* const red = redb(b);
    {  // expand_dw_v8_body's depthwise with HF, DH and whole units (W), one image an item, over 16 thread groups
      const int ch = c0 + 2 * pair;
      __half2 wh[KK];
#pragma unroll
      for (int t = 0; t < KK; ++t) wh[t] = wdh[t * PAIRS + pair];
      const float2 db = wdw_bias[pair];
      const __half2 dbias_h = __floats2half2_rn(db.x, db.y);
      float sum0 = 0.f, sum1 = 0.f;
      const int rows = g.oh1 - g.oh0, nseg = (rows + R - 1) / R, items = nseg * ngroups;
      const int dq = dv.ngroups.div(GROUPS), dr = GROUPS - dq * ngroups;
      int seg = dv.ngroups.div(group), og = group - seg * ngroups;
      for (int j = group; j < items; j += GROUPS) {
        const int orow0 = seg * R, ow0 = og * OW;
        seg += dq;
        og += dr;
        if (og >= ngroups) {
          og -= ngroups;
          ++seg;
        }
        const __half* ebase = E + (orow0 * S * WE + ow0 * S) * LDE + 2 * pair;
        const int d0 = ((it.n * p.Ho + g.oh0 + orow0) * p.Wo + ow0) * p.hidden + ch;
        __half2 acch[R][OW];
#pragma unroll
        for (int er = 0; er < SEG_E; ++er) {
          const __half* erow = ebase + er * WE * LDE;
          __half2 eh[IN];
#pragma unroll
          for (int x = 0; x < IN; ++x) eh[x] = *reinterpret_cast<const __half2*>(erow + x * LDE);
#pragma unroll
          for (int o = 0; o < R; ++o) {
            const int dy = er - o * S;
            if (dy < 0 || dy >= KS) continue;
            if (dy == 0)
#pragma unroll
              for (int u = 0; u < OW; ++u) acch[o][u] = __float2half2_rn(0.f);
#pragma unroll
            for (int u = 0; u < OW; ++u)
#pragma unroll
              for (int dx = 0; dx < KS; ++dx) acch[o][u] = __hfma2(eh[u * S + dx], wh[dy * KS + dx], acch[o][u]);
            if (dy == KS - 1) {  // output row o is complete: bias, SiLU, the row's pool sum on half2
              int dofs = d0 + o * p.Wo * p.hidden;
              __half2 row_sum;
#pragma unroll
              for (int u = 0; u < OW; ++u) {
                const __half2 s = silu_of_half_h2(__hadd2(acch[o][u], dbias_h));
                *reinterpret_cast<__half2*>(p.d + dofs) = s;
                dofs += p.hidden;
                row_sum = u == 0 ? s : __hadd2(row_sum, s);
              }
              const float2 f = __half22float2(row_sum);
              sum0 += f.x;
              sum1 += f.y;
            }
          }
        }
      }
      *reinterpret_cast<float2*>(red + group * HC + 2 * pair) = make_float2(sum0, sum1);
    }
    bf::mbar_arrive(e_empty(b));  // this thread's reads of E[b] are done
    bf::named_barrier_sync(2, kV8PcConsumers);  // every group's sums in red[b]
    if (tid < HC) {  // the pool's sums of the item: channel tid of the chunk, the groups' sums in group order
      float s = 0.f;
#pragma unroll
      for (int gi = 0; gi < GROUPS; ++gi) s += red[gi * HC + tid];
      p.partial[((size_t)it.n * bands + it.band) * p.hid_pad + c0 + tid] = s;
    }
  }
}
