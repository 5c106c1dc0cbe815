// Kernel 1 of the MBConv block, version 8, stage 1 (NOTES.md, "Next: kernel 1 version 8" and "MBConv version 8:
// what was built"): version 3's arithmetic (mbconv_v2.cuh, V3 = true), reorganised so that fewer instructions
// run per CTA item and fewer of them wait:
//   - persistent CTAs (as many as fit: two per SM) walk a contiguous range of (chunk, image, band) items,
//     chunk-major, bands top to bottom (kernel1_v8_item: item i = (chunk, image, band) of i = (chunk * N + n)
//     * bands + band); the chunk's expand biases (halved) and depthwise taps (halved) and bias stay in
//     registers while the chunk lasts, its U rows in shared memory (cp.async, version 3's padded layout);
//   - X of the next item arrives by one bulk copy (a band's rows of x are one contiguous NHWC range) into a
//     dense X buffer (row pitch C_in), issued by thread 0 right after the barrier that ends the expand, so it
//     lands during the depthwise on an mbarrier; the k16 steps past C_in (k_pad = C_in + 8) read the next
//     pixel's first channels times U's zero columns (products +-0); the buffer is zeroed once per CTA so that
//     every value read is finite;
//   - E's side border (the padding columns) is written once per CTA; the rows above / below the image at
//     the top / bottom bands per item;
//   - the expand epilogue: biases from registers, no per-store test except in a band's last m-tile;
//   - the pool without atomics: each depthwise group writes its HC sums to red[group][HC]; HC threads add
//     them in group order during the next item's expand (and after the last item).
// Not in this stage (NOTES): E's halo rows kept between bands, the depthwise over vertical segments with
// rolling accumulator rows, E's pixel pitch 60 halves. The depthwise is version 3's loop, so D is version 3's
// bit for bit; the pool's sum over groups is in a fixed order, not version 3's atomic order.
#pragma once
#include <algorithm>

#include "mbconv_v2.cuh"
#include "ptx_sm90.cuh"

namespace mb {

template <int HC>
struct V8Dw {
  static constexpr int PAIRS = HC / 2, GROUPS = kExpandThreads / PAIRS;  // version 3's depthwise partition
};

// Shared memory of version 8's kernel 1 (cuda_kernels/mbconv.py kernel1_smem_bytes(version=8) mirrors it):
// dense X [m_pad x C_in + 8 halves] (the last row's k16 tail reads 8 halves past the band), U chunk
// [HC x (k_pad + 8)], E tile [e_rows x WE x (HC + 8)], the pool's per-group sums [GROUPS x HC] fp32, the chunk's
// depthwise taps and bias, halved, as float2 per channel pair [(k k + 1) x HC / 2], one mbarrier.
__host__ __device__ inline int expand_dw_v8_smem_bytes(int H, int W, int Wo, int rows, int ks, int stride, int C_in,
                                                      int k_pad, int chunk) {
  const int ow = stride == 1 ? 4 : 2;
  const int e_rows = (rows - 1) * stride + ks;
  const int we = (round_up(Wo, ow) - 1) * stride + ks;
  const int m_pad = round_up((e_rows < H ? e_rows : H) * W, 16);
  const int groups = kExpandThreads / (chunk / 2);
  return round_up(m_pad * C_in + 8, 8) * 2 + chunk * (k_pad + 8) * 2 + e_rows * we * (chunk + 8) * 2 +
         groups * chunk * 4 + (ks * ks + 1) * chunk * 4 + 8;
}

// Item i of the launch: chunk c, image n, band b with i = (c * N + n) * bands + b.
struct V8Item {
  int chunk, n, band;
  __device__ V8Item(int i, int N, int bands) {
    const int per_chunk = N * bands;
    chunk = i / per_chunk;
    const int r = i - chunk * per_chunk;
    n = r / bands;
    band = r - n * bands;
  }
};

template <int HC, int KS, int S>
__global__ void __launch_bounds__(kExpandThreads, 2) expand_dw_v8_kernel(const Params p) {
  using bf::cp_async16;
  using bf::smem_addr;
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int LDE = HC + 8, PAD = KS / 2, OW = DwTile<S>::OW, IN = (OW - 1) * S + KS, ECH = HC / 8;
  constexpr int NT = HC / 8, NP = HC / 16, KK = KS * KS;
  constexpr int PAIRS = V8Dw<HC>::PAIRS, GROUPS = V8Dw<HC>::GROUPS;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int bands = p.row_blocks;
  const int total = p.hid_pad / HC * p.N * bands;
  // this CTA's items: [i_begin, i_end), a contiguous share of the list (the launcher keeps gridDim.x <= total)
  const int i_begin = (int)((long long)blockIdx.x * total / gridDim.x);
  const int i_end = (int)((long long)(blockIdx.x + 1) * total / gridDim.x);
  const int ngroups = (p.Wo + OW - 1) / OW;
  const int WE = (ngroups * OW - 1) * S + KS;  // E tile width: column c holds input column c - PAD
  const int rows_max = (p.rows_per_tile - 1) * S + KS;
  const int m_pad = round_up(min(rows_max, p.H) * p.W, 16);
  const int x_halves = round_up(m_pad * p.C_in + 8, 8);
  const int ldu = p.k_pad + 8;
  __half* Xs = reinterpret_cast<__half*>(smem);
  __half* Us = Xs + x_halves;
  __half* Es = Us + HC * ldu;
  float* red = reinterpret_cast<float*>(Es + rows_max * WE * LDE);
  float2* wdw = reinterpret_cast<float2*>(red + GROUPS * HC);  // [KK + 1][PAIRS]: taps, then the bias
  const uint32_t bar = smem_addr(wdw + (KK + 1) * PAIRS);

  // Once per CTA: X zeroed (every value the expand reads is finite), E's side columns (never written by the
  // expand, which stores columns PAD .. PAD + W - 1 only), the mbarrier.
  for (int i = tid; i < x_halves / 8; i += kExpandThreads) reinterpret_cast<uint4*>(Xs)[i] = make_uint4(0, 0, 0, 0);
  {
    const int side = WE - p.W, per_row = side * ECH;
    for (int i = tid; i < rows_max * per_row; i += kExpandThreads) {
      const int r = i / per_row, rest = i - r * per_row;
      const int col = rest / ECH, c = rest - col * ECH;
      const int ec = col < PAD ? col : p.W + col;
      *reinterpret_cast<uint4*>(Es + (r * WE + ec) * LDE + c * 8) = make_uint4(0, 0, 0, 0);
    }
  }
  if (tid == 0) {
    bf::mbar_init(bar, 1);
    bf::fence_barrier_init();
  }
  bf::fence_proxy_async_smem();  // the zeros of X before the bulk copies into it
  __syncthreads();
  // PDL (pdl.h): x, the weights and every global write follow the wait; the dependents' own wait holds them
  // until this grid has finished, so the trigger may follow.
  pdl::wait();
  pdl::launch_dependents();

  // The band geometry of an item (version 3's, per CTA there).
  auto band_rows_of = [&](int band, int& ih_lo, int& ih_hi) {
    const int oh0 = band * p.rows_per_tile, oh1 = min(oh0 + p.rows_per_tile, p.Ho);
    const int r0 = oh0 * S - PAD, e_rows = (oh1 - oh0 - 1) * S + KS;
    ih_lo = max(0, r0);
    ih_hi = min(p.H - 1, r0 + e_rows - 1);
  };
  auto issue_x = [&](int i) {  // thread 0: the item's X band, one bulk copy
    const V8Item it(i, p.N, bands);
    int ih_lo, ih_hi;
    band_rows_of(it.band, ih_lo, ih_hi);
    const uint32_t bytes = (uint32_t)((ih_hi - ih_lo + 1) * p.W * p.C_in * 2);
    bf::mbar_arrive_expect_tx(bar, bytes);
    bf::bulk_copy_g2s(smem_addr(Xs), p.x + ((size_t)it.n * p.H + ih_lo) * p.W * p.C_in, bytes, bar);
  };
  const int kch = p.k_pad / 8;
  const float inv_kch = 1.f / kch;
  auto issue_u = [&](int c0) {  // every thread: the chunk's U rows (version 3's padded layout), one commit group
    const __half* usrc = p.w_exp + (size_t)c0 * p.k_pad;
    for (int i = tid; i < HC * kch; i += kExpandThreads) {
      const int r = div_small(i, inv_kch), c = i - r * kch;
      cp_async16(smem_addr(Us + r * ldu + c * 8), usrc + (size_t)r * p.k_pad + c * 8, true);
    }
    bf::cp_async_commit();
  };
  // The pool's sums of item i: channel tid of the chunk, the groups' sums added in group order.
  auto pool_store = [&](int i) {
    if (tid < HC) {
      const V8Item it(i, p.N, bands);
      float s = 0.f;
#pragma unroll
      for (int g = 0; g < GROUPS; ++g) s += red[g * HC + tid];
      p.partial[((size_t)it.n * bands + it.band) * p.hid_pad + it.chunk * HC + tid] = s;
    }
  };

  if (i_begin >= i_end) return;
  if (tid == 0) issue_x(i_begin);
  issue_u(V8Item(i_begin, p.N, bands).chunk * HC);

  const int pair = tid % PAIRS, group = tid / PAIRS;
  const int a_row = lane & 15, a_k = (lane >> 4) * 8;
  const int b_row = (lane & 7) + ((lane >> 4) << 3), b_k = ((lane >> 3) & 1) * 8;
  const float inv_w = 1.f / p.W;
  // The chunk's expand biases of this lane's columns, halved, in registers while the chunk lasts; its depthwise
  // taps and bias, halved (version 3's values), in wdw (written after barrier A of the chunk's first item).
  float hbias[NT][2];
  int cur_chunk = -1;
  bool new_chunk = false;
  uint32_t phase = 0;
  for (int i = i_begin; i < i_end; ++i) {
    const V8Item it(i, p.N, bands);
    const int c0 = it.chunk * HC;
    new_chunk = it.chunk != cur_chunk;
    if (new_chunk) {
      cur_chunk = it.chunk;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int u = 0; u < 2; ++u) hbias[nt][u] = 0.5f * __ldg(p.b_exp + c0 + nt * 8 + (lane & 3) * 2 + u);
    }
    const int oh0 = it.band * p.rows_per_tile;
    const int oh1 = min(oh0 + p.rows_per_tile, p.Ho);
    const int r0 = oh0 * S - PAD;
    const int e_rows = (oh1 - oh0 - 1) * S + KS;
    int ih_lo, ih_hi;
    band_rows_of(it.band, ih_lo, ih_hi);
    const int npix = (ih_hi - ih_lo + 1) * p.W;
    bf::cp_async_wait<0>();  // U of a new chunk (an empty wait otherwise)
    bf::mbar_wait(bar, phase);
    phase ^= 1;
    __syncthreads();  // barrier A: X and U in place; E and red free (the previous item's depthwise is done)
    if (i > i_begin) pool_store(i - 1);
    if (new_chunk)  // the previous chunk's depthwise is done (barrier A); read after barrier B
      for (int j = tid; j < (KK + 1) * PAIRS; j += kExpandThreads) {
        const int t = j / PAIRS, ch = c0 + 2 * (j - t * PAIRS);
        const float* src = t < KK ? p.w_dw + (size_t)t * p.hid_pad + ch : p.b_dw + ch;
        wdw[j] = make_float2(0.5f * __ldg(src), 0.5f * __ldg(src + 1));
      }

    // E rows above / below the image (whole rows, at the top and bottom bands only)
    {
      const int in_lo = ih_lo - r0, in_hi = ih_hi - r0;
      const int top = in_lo * WE * ECH, bottom0 = (in_hi + 1) * WE * ECH, bottom = e_rows * WE * ECH - bottom0;
      for (int j0 = tid; j0 < top + bottom; j0 += kExpandThreads) {
        const int j = j0 < top ? j0 : bottom0 + j0 - top;
        const int e = j / ECH, c = j - e * ECH;
        *reinterpret_cast<uint4*>(Es + e * LDE + c * 8) = make_uint4(0, 0, 0, 0);
      }
    }

    // The expand: E = SiLU(X U^T + a) (version 3's fragments and rounding; X rows at pitch C_in)
    {
      const int e_off = (ih_lo - r0) * WE + PAD;  // E position of the band's first image pixel
      const int mtiles = (npix + 15) / 16;
      for (int mt = warp; mt < mtiles; mt += kExpandThreads / 32) {
        float acc[NT][4];
#pragma unroll
        for (int a = 0; a < NT; ++a)
#pragma unroll
          for (int b = 0; b < 4; ++b) acc[a][b] = 0.f;
        for (int k0 = 0; k0 < p.k_pad; k0 += 16) {
          uint32_t a[4];
          bf::ldmatrix_x4(a, smem_addr(Xs + (mt * 16 + a_row) * p.C_in + k0 + a_k));
#pragma unroll
          for (int np = 0; np < NP; ++np) {
            uint32_t b[4];
            bf::ldmatrix_x4(b, smem_addr(Us + (np * 16 + b_row) * ldu + k0 + b_k));
            bf::mma_m16n8k16(acc[2 * np], a, b[0], b[1]);
            bf::mma_m16n8k16(acc[2 * np + 1], a, b[2], b[3]);
          }
        }
        __half* ep[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int q = mt * 16 + (lane >> 2) + h * 8;
          const int row = div_small(q, inv_w);
          ep[h] = Es + (e_off + row * WE + (q - row * p.W)) * LDE + (lane & 3) * 2;
        }
        auto epilogue = [&](auto full) {  // full: all 16 rows are pixels of the band (every m-tile but the last)
          const int left = npix - mt * 16;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            if (!decltype(full)::value && (lane >> 2) + h * 8 >= left) continue;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
              *reinterpret_cast<__half2*>(ep[h] + nt * 8) =
                  __floats2half2_rn(silu_of_half(fmaf(acc[nt][2 * h], 0.5f, hbias[nt][0])),
                                    silu_of_half(fmaf(acc[nt][2 * h + 1], 0.5f, hbias[nt][1])));
          }
        };
        if (mt * 16 + 16 <= npix)
          epilogue(std::true_type{});
        else
          epilogue(std::false_type{});
      }
    }
    __syncthreads();  // barrier B: E complete; X and U dead; the previous item's red read
    if (i + 1 < i_end) {  // the next item's X (and U, for a new chunk) land during the depthwise
      if (tid == 0) issue_x(i + 1);
      const int next_chunk = V8Item(i + 1, p.N, bands).chunk;
      if (next_chunk != it.chunk) issue_u(next_chunk * HC);
    }

    // The depthwise: version 3's loop (items of OW outputs of a row, stepped without a division), its taps
    // and bias from registers.
    if (group < GROUPS) {
      const int ch = c0 + 2 * pair;
      float w0[KK], w1[KK];
#pragma unroll
      for (int t = 0; t < KK; ++t) {
        const float2 w = wdw[t * PAIRS + pair];
        w0[t] = w.x;
        w1[t] = w.y;
      }
      const float2 db = wdw[KK * PAIRS + pair];
      const float dbias0 = db.x, dbias1 = db.y;
      const bool store = ch < p.hidden;
      float sum0 = 0.f, sum1 = 0.f;
      const int items = (oh1 - oh0) * ngroups;
      const int dq = GROUPS / ngroups, dr = GROUPS - dq * ngroups;
      int v3_row = group / ngroups, v3_og = group - v3_row * ngroups;
      for (int j = group; j < items; j += GROUPS) {
        const int orow = v3_row, ow0 = v3_og * OW;
        v3_row += dq;
        v3_og += dr;
        if (v3_og >= ngroups) {
          v3_og -= ngroups;
          ++v3_row;
        }
        float acc0[OW], acc1[OW];
#pragma unroll
        for (int o = 0; o < OW; ++o) {
          acc0[o] = dbias0;
          acc1[o] = dbias1;
        }
        const __half* ebase = Es + (orow * S * WE + ow0 * S) * LDE + 2 * pair;
#pragma unroll
        for (int dy = 0; dy < KS; ++dy) {
          const __half* erow = ebase + dy * WE * LDE;
          float2 e[IN];
#pragma unroll
          for (int x = 0; x < IN; ++x) e[x] = __half22float2(*reinterpret_cast<const __half2*>(erow + x * LDE));
#pragma unroll
          for (int o = 0; o < OW; ++o)
#pragma unroll
            for (int dx = 0; dx < KS; ++dx) {
              acc0[o] = fmaf(e[o * S + dx].x, w0[dy * KS + dx], acc0[o]);
              acc1[o] = fmaf(e[o * S + dx].y, w1[dy * KS + dx], acc1[o]);
            }
        }
        __half* dp = p.d + ((size_t)(it.n * p.Ho + oh0 + orow) * p.Wo + ow0) * p.hidden + ch;
        const int valid = min(OW, p.Wo - ow0);
#pragma unroll
        for (int o = 0; o < OW; ++o) {
          if (valid < OW && o >= valid) break;
          const float s0 = silu_of_half(acc0[o]), s1 = silu_of_half(acc1[o]);
          if (store) *reinterpret_cast<__half2*>(dp) = __floats2half2_rn(s0, s1);
          dp += p.hidden;
          sum0 += s0;
          sum1 += s1;
        }
      }
      *reinterpret_cast<float2*>(red + group * HC + 2 * pair) = make_float2(sum0, sum1);
    }
  }
  __syncthreads();
  pool_store(i_end - 1);
}

// Persistent: as many CTAs as fit on the device (two per SM at <= 113 KB), at most one per item.
template <int HC, int KS, int S>
cudaError_t launch_expand_dw_v8(const Params& p, cudaStream_t stream, bool pdl) {
  constexpr int kMaxDevices = 64;
  static int configured[kMaxDevices] = {}, last_smem[kMaxDevices] = {}, last_ctas[kMaxDevices] = {},
             sms[kMaxDevices] = {};
  const auto kernel = expand_dw_v8_kernel<HC, KS, S>;
  const int smem = expand_dw_v8_smem_bytes(p.H, p.W, p.Wo, p.rows_per_tile, KS, S, p.C_in, p.k_pad, HC);
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (smem > configured[dev]) {
    int optin = 0;
    err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err != cudaSuccess) return err;
    if (smem > optin) return cudaErrorInvalidConfiguration;
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
    if (err != cudaSuccess) return err;
    configured[dev] = optin;
    last_smem[dev] = 0;
  }
  if (smem != last_smem[dev]) {  // the occupancy of this shared-memory size (cached for the last size asked)
    err = cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return err;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&last_ctas[dev], kernel, kExpandThreads, smem);
    if (err != cudaSuccess) return err;
    if (last_ctas[dev] < 1) return cudaErrorInvalidConfiguration;
    last_smem[dev] = smem;
  }
  const long long total = (long long)(p.hid_pad / HC) * p.N * p.row_blocks;
  if (total >= (1ll << 31)) return cudaErrorInvalidValue;
  const int grid = (int)std::min<long long>(total, (long long)last_ctas[dev] * sms[dev]);
  if (pdl && pdl::device_supports(dev))
    return pdl::launch(kernel, dim3(grid), dim3(kExpandThreads), smem, stream, p);
  kernel<<<grid, kExpandThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

// Version 8 where it applies (an expand conv: kernel1_v8_applies), else version 3's kernel 1.
template <int KS>
cudaError_t launch_expand_dw_v8_ks(const Params& p, int chunk, cudaStream_t stream, bool pdl) {
  if (p.w_exp == nullptr) return KS == 3 ? launch_expand_dw_v3_k3(p, chunk, stream, pdl) : launch_expand_dw_v3_k5(p, chunk, stream, pdl);
  switch ((chunk == 48 ? 2 : chunk == 32 ? 0 : 4) + (p.stride == 2 ? 1 : 0)) {
    case 0: return launch_expand_dw_v8<32, KS, 1>(p, stream, pdl);
    case 1: return launch_expand_dw_v8<32, KS, 2>(p, stream, pdl);
    case 2: return launch_expand_dw_v8<48, KS, 1>(p, stream, pdl);
    case 3: return launch_expand_dw_v8<48, KS, 2>(p, stream, pdl);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mb
