// SE version 5: the squeeze-excitation in one kernel, one cluster of 8 CTAs per group of 4 images (8 until session 35:
// se_v5_images) (NOTES.md "Current state", session 18; where SE version 4 applies, on unless CUDA_KERNELS_SE_V5=0: s18
// call 7, B0 1.716 -> 1.695 ms).
//
// SE version 4 measured ~16 us at hidden 1152 (fc1 ~6, fc2 ~10): FC1's partial products made a round trip through
// global memory and fc2's warps each summed 18 slices of them in a long serial stream. Here CTA r of a cluster owns the
// hidden channels [r sw, (r + 1) sw) (sw = hidden / 8 rounded up to 8) of the cluster's 8 images:
//   before the wait: W1's columns and W2's rows of its channels into shared memory (float4 batches);
//   its images' pool over its channels (kernel 1's per-band partials, in band order, x 1 / (Ho Wo));
//   FC1's partial product over its channels, part[m][j], in its own shared memory;
//   cluster barrier; h[m][j] = SiLU(b1[j] + the 8 CTAs' parts summed in rank order, read through distributed shared
//   memory) - every CTA computes the same bits; FC2 and the sigmoid for its channels and images;
//   the cluster barrier's wait before exit (a CTA's part stays readable until every CTA has read it).
// No atomics, no scratch in global memory; every sum in a fixed order.
//
// SE version 6 (session 19, CUDA_KERNELS_SE_V6): the same cluster and data, its products register-blocked over the 8
// images. Session 19's call 2 measured version 5 at 17.8 us at hidden 1152 without PDL (Nsight Compute: 19.5 us,
// ~4,300 instructions a warp at 33% issue: two warps a scheduler each running a long serial stream, two loads per
// FMA). Here 512 threads; FC1 thread (j, s) holds the 8 images' sums of output j over its split s of the CTA's
// channels (one W1 load and two float4 loads of the pooled [channel][image] per 8 FMAs), the splits summed in order;
// FC2 thread (c, s) likewise over its split of the squeeze outputs, h stored [j][image].
#include <cstdlib>
#include <cstring>

#include "mbconv.cuh"
#include "mbconv_launch.cuh"
#include "mbconv_ptx.cuh"
#include "mbconv_se.cuh"
#include "pdl.h"
#include "ptx_sm90.cuh"  // BF_SM90: clusters exist from sm_90 on

namespace mb {

namespace {

constexpr int kSeV5Cluster = 8, kSeV5Threads = 256, kSeV5Images = 8, kSeV5Batch = 8;
constexpr int kSeV5MaxSmem = 227 * 1024;  // Hopper's opt-in limit (B2's 7.x: 201,344 bytes)

__host__ __device__ constexpr int se_v5_width(int hidden) {  // channels per CTA, a multiple of 8
  return ((hidden + kSeV5Cluster - 1) / kSeV5Cluster + 7) / 8 * 8;
}
struct SeV5Layout {  // shared memory, in floats: W1's columns [sq][sw + 1], W2's rows [sw][sq | 1], pool, part, h
  int sw, ld1, ld2, w1, w2, pooled, part, h, floats;
  __host__ __device__ SeV5Layout(int hidden, int sq, int images = kSeV5Images)
      : sw(se_v5_width(hidden)), ld1(sw + 1), ld2(sq | 1), w1(0), w2(sq * ld1), pooled(w2 + sw * ld2),
        part(pooled + images * sw), h(part + images * sq), floats(h + images * sq) {}
};
// Images a cluster: 4 unless CUDA_KERNELS_SE_V5_IMAGES=8 (the default since session 35: s35 call 4, B0 -12.9 us,
// the SE's share of 6.1's block 14.4 -> 12.7 us and of 4.1's 6.7 -> 6.0; bit for bit the 8-image output): twice the
// clusters of 8 (256 CTAs at batch 128: two an SM), each CTA's FC1 / FC2 loops half as long (at hidden 1152: 2 -> 1
// and 5 -> 3 rounds of its 256 threads), W1 / W2 copied by twice the CTAs (before the wait). Version 6 keeps 8.
inline int se_v5_images() {
  const char* v = std::getenv("CUDA_KERNELS_SE_V5_IMAGES");
  return v != nullptr && std::strcmp(v, "8") == 0 ? kSeV5Images : 4;
}

constexpr int kSeV6Threads = 512;
__host__ __device__ constexpr int se_v6_splits(int n, int threads) { return n >= threads ? 1 : threads / n; }
struct SeV6Layout {  // version 5's W1 and W2 copies, then pooled [sw][8], part [8][sq], h [sq][8], the splits' sums
  int sw, ld1, ld2, s1, s2, w1, w2, pooled, part, h, scratch, floats;
  __host__ __device__ SeV6Layout(int hidden, int sq)
      : sw(se_v5_width(hidden)), ld1(sw + 1), ld2(sq | 1), s1(se_v6_splits(sq, kSeV6Threads)),
        s2(se_v6_splits(sw, kSeV6Threads)), w1(0), w2(sq * ld1), pooled((w2 + sw * ld2 + 3) / 4 * 4),  // float4 reads
        part(pooled + kSeV5Images * sw),
        h(part + kSeV5Images * sq), scratch(h + kSeV5Images * sq),
        floats(scratch + kSeV5Images * max(s1 * sq, s2 * sw)) {}
};

__device__ __forceinline__ float ld_cluster(uint32_t local, int rank) {
#if BF_SM90
  uint32_t remote;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(remote) : "memory");
  return v;
#else
  __trap();
  return 0.f;
#endif
}

// The value at `local` (this CTA's shared memory) in each CTA of the cluster, summed in rank order: every CTA gets the
// same bits. Read only between the cluster barrier that releases the values and the arrive that frees them.
__device__ __forceinline__ float cluster_sum(const float* local) {
  const uint32_t addr = smem_addr(local);
  float v[kSeV5Cluster];
#pragma unroll
  for (int r = 0; r < kSeV5Cluster; ++r) v[r] = ld_cluster(addr, r);
  float s = 0.f;
#pragma unroll
  for (int r = 0; r < kSeV5Cluster; ++r) s += v[r];
  return s;
}

// An extension built for sm_80 as well compiles the kernel to a trap there (no clusters); versions 9-11, the only ones
// that launch it, are refused on such a device before any launch (mbconv.cu version_needs_sm90).
template <int G = kSeV5Images>  // images a cluster
__global__ void __launch_bounds__(kSeV5Threads) se_v5_kernel(const Params p) {
#if !BF_SM90
  __trap();
#else
  extern __shared__ __align__(16) float se5_smem[];
  const SeV5Layout L(p.hidden, p.sq, G);
  float *w1s = se5_smem + L.w1, *w2s = se5_smem + L.w2, *pooled = se5_smem + L.pooled;
  float *part = se5_smem + L.part, *h = se5_smem + L.h;
  const int tid = threadIdx.x, rank = blockIdx.x, n0 = blockIdx.y * G;
  const int c0 = rank * L.sw, cw = max(0, min(L.sw, p.hidden - c0)), q = cw / 4;  // cw % 8 == 0
  // W1's columns c0 .. c0 + cw of every row j, and W2's rows c0 .. c0 + cw (cw * sq contiguous floats): weights only,
  // ahead of the wait
  se_copy_columns<kSeV5Threads, kSeV5Batch, false>(w1s, L.ld1, p.w_se1, p.hidden, c0, q, q, p.sq, tid);
  se_copy_rows<kSeV5Threads, kSeV5Batch>(w2s, L.ld2, p.w_se2 + (size_t)c0 * p.sq, cw * p.sq / 4, p.sq, tid);
  pdl::wait();  // kernel 1's partial sums
  pdl::launch_dependents();
  // the pool: (image m, float4 c4 of this CTA's channels) summed over the bands in band order
  const float inv = 1.f / float(p.Ho * p.Wo);
  for (int i = tid; i < G * q; i += kSeV5Threads) {
    const int m = i / q, c4 = i % q, n = n0 + m;
    const float4 s = n < p.N ? se_pool4(p, n, c0, c4) : make_float4(0.f, 0.f, 0.f, 0.f);
    float* d = pooled + m * L.sw + 4 * c4;
    d[0] = s.x * inv, d[1] = s.y * inv, d[2] = s.z * inv, d[3] = s.w * inv;
  }
  __syncthreads();
  // FC1's partial product over this CTA's channels (four chains, summed in a fixed order)
  for (int o = tid; o < G * p.sq; o += kSeV5Threads) {
    const int m = o / p.sq, j = o % p.sq;
    const float* w = w1s + j * L.ld1;
    const float* x = pooled + m * L.sw;
    float a[4] = {0.f, 0.f, 0.f, 0.f};
    for (int c = 0; c < cw; c += 4) {  // cw % 8 == 0
#pragma unroll
      for (int t = 0; t < 4; ++t) a[t] = fmaf(w[c + t], x[c + t], a[t]);
    }
    part[o] = (a[0] + a[1]) + (a[2] + a[3]);
  }
  // release this CTA's part to the cluster, acquire the others'
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  for (int o = tid; o < G * p.sq; o += kSeV5Threads) {
    const float z = cluster_sum(part + o) + p.b_se1[o % p.sq];
    h[o] = z / (1.f + expf(-z));
  }
  // this CTA has read every part it needs: arrive now, wait before exit (no CTA leaves while its part is read)
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  __syncthreads();
  // FC2 and the sigmoid for this CTA's channels and the cluster's images
  for (int o = tid; o < G * cw; o += kSeV5Threads) {
    const int m = o / cw, c = o % cw, n = n0 + m;
    const float* w = w2s + c * L.ld2;
    const float* x = h + m * p.sq;
    float a0 = 0.f, a1 = 0.f;
    int j = 0;
    for (; j + 1 < p.sq; j += 2) {
      a0 = fmaf(w[j], x[j], a0);
      a1 = fmaf(w[j + 1], x[j + 1], a1);
    }
    if (j < p.sq) a0 = fmaf(w[j], x[j], a0);
    if (n < p.N) p.scale[(size_t)n * p.hid_pad + c0 + c] = 1.f / (1.f + expf(-(a0 + a1 + __ldg(p.b_se2 + c0 + c))));
  }
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

// 8 images' fp32 values at v (16-byte aligned) into x
__device__ __forceinline__ void se_load8(float (&x)[kSeV5Images], const float* v) {
  const float4 a = *reinterpret_cast<const float4*>(v), b = *reinterpret_cast<const float4*>(v + 4);
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}

// Thread (o, s) of n_out x splits: output o's sums for the 8 images over inputs [s k, (s + 1) k), k = ceil(k_total /
// splits) (one W load and two float4 loads of x's [input][image] per 8 FMAs); w's row o at w + o ld; the sums to
// scratch[(s 8 + m) n_out + o], for the caller to add over s in order.
__device__ __forceinline__ void se_v6_split_product(float* scratch, const float* w, int ld, const float* x, int n_out,
                                                    int k_total, int splits, int tid) {
  constexpr int G = kSeV5Images;
  const int k = (k_total + splits - 1) / splits;
  for (int t = tid; t < n_out * splits; t += kSeV6Threads) {
    const int o = t % n_out, s = t / n_out, end = min(k_total, (s + 1) * k);
    float a[G] = {}, xv[G];
    const float* wo = w + o * ld;
    for (int i = s * k; i < end; ++i) {
      const float wi = wo[i];
      se_load8(xv, x + i * G);
#pragma unroll
      for (int m = 0; m < G; ++m) a[m] = fmaf(wi, xv[m], a[m]);
    }
#pragma unroll
    for (int m = 0; m < G; ++m) scratch[(s * G + m) * n_out + o] = a[m];
  }
}

// Two CTAs an SM (at most 64 registers): with one, 15 clusters of 8 fit the H200 at once and the 16th of batch 128 ran
// in a second wave (s19 call 5, probes/probe_clusters.cu; B0's 6.1 19.3 -> 14.0 us without PDL).
__global__ void __launch_bounds__(kSeV6Threads, 2) se_v6_kernel(const Params p) {
#if !BF_SM90
  __trap();
#else
  constexpr int G = kSeV5Images;
  extern __shared__ __align__(16) float se6_smem[];
  const SeV6Layout L(p.hidden, p.sq);
  float *w1s = se6_smem + L.w1, *w2s = se6_smem + L.w2, *pooled = se6_smem + L.pooled;
  float *part = se6_smem + L.part, *h = se6_smem + L.h, *scratch = se6_smem + L.scratch;
  const int tid = threadIdx.x, rank = blockIdx.x, n0 = blockIdx.y * G, sq = p.sq;
  const int c0 = rank * L.sw, cw = max(0, min(L.sw, p.hidden - c0)), q = cw / 4;  // cw % 8 == 0
  se_copy_columns<kSeV6Threads, kSeV5Batch, false>(w1s, L.ld1, p.w_se1, p.hidden, c0, q, q, sq, tid);
  se_copy_rows<kSeV6Threads, kSeV5Batch>(w2s, L.ld2, p.w_se2 + (size_t)c0 * sq, cw * sq / 4, sq, tid);
  pdl::wait();  // kernel 1's partial sums
  pdl::launch_dependents();
  // the pool, stored [channel][image]
  const float inv = 1.f / float(p.Ho * p.Wo);
  for (int i = tid; i < G * q; i += kSeV6Threads) {  // image fastest: the stores 4-way conflicted, not 32
    const int m = i % G, c4 = i / G, n = n0 + m;
    const float4 s = n < p.N ? se_pool4(p, n, c0, c4) : make_float4(0.f, 0.f, 0.f, 0.f);
    float* d = pooled + 4 * c4 * G + m;
    d[0] = s.x * inv, d[G] = s.y * inv, d[2 * G] = s.z * inv, d[3 * G] = s.w * inv;
  }
  __syncthreads();
  se_v6_split_product(scratch, w1s, L.ld1, pooled, sq, cw, L.s1, tid);  // FC1 over this CTA's channels
  __syncthreads();
  for (int o = tid; o < G * sq; o += kSeV6Threads) {  // the splits in order: this CTA's part [image][j]
    float v = 0.f;
    for (int s = 0; s < L.s1; ++s) v += scratch[s * G * sq + o];
    part[o] = v;
  }
  // release this CTA's part to the cluster, acquire the others'
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  for (int o = tid; o < G * sq; o += kSeV6Threads) {  // o = j G + m: h's [j][image]
    const float z = cluster_sum(part + (o % G) * sq + o / G) + p.b_se1[o / G];
    h[o] = z / (1.f + expf(-z));
  }
  // this CTA has read every part it needs: arrive now, wait before exit (no CTA leaves while its part is read)
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  __syncthreads();
  se_v6_split_product(scratch, w2s, L.ld2, h, cw, sq, L.s2, tid);  // FC2 for this CTA's channels
  __syncthreads();
  for (int o = tid; o < G * cw; o += kSeV6Threads) {  // the splits in order, the bias, the sigmoid
    const int m = o / cw, c = o % cw, n = n0 + m;
    float v = 0.f;
    for (int s = 0; s < L.s2; ++s) v += scratch[s * G * cw + o];
    if (n < p.N) p.scale[(size_t)n * p.hid_pad + c0 + c] = 1.f / (1.f + expf(-(v + __ldg(p.b_se2 + c0 + c))));
  }
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

}  // namespace

bool se_v5_requested() {  // on unless "0" since session 18 (s18 call 7: B0 1.716 -> 1.695 ms)
  const char* v = std::getenv("CUDA_KERNELS_SE_V5");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

bool se_v5_fits(const Params& p) {
  return p.sq >= 1 && p.hidden % 8 == 0 && p.hidden >= 8 && SeV5Layout(p.hidden, p.sq).floats * 4 <= kSeV5MaxSmem;
}

bool se_v6_requested() {  // "1": SE version 6 where version 5 would run (off: s19 call 5, B0 1.689 -> 1.685 ms)
  const char* v = std::getenv("CUDA_KERNELS_SE_V6");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

bool se_v6_fits(const Params& p) {
  return p.sq >= 1 && p.hidden % 8 == 0 && p.hidden >= 8 && SeV6Layout(p.hidden, p.sq).floats * 4 <= kSeV5MaxSmem;
}

namespace {

// One cluster of 8 CTAs per `images` images (grid 8 x ceil(N / images)), PDL where asked for and supported.
template <typename Kernel>
cudaError_t launch_se_cluster(Kernel kernel, DeviceSlots& slots, int smem, int threads, const Params& p,
                              cudaStream_t stream, bool pdl, int images = kSeV5Images) {
  int dev = 0;
  const cudaError_t err = prepare(kernel, slots, smem, threads, dev);
  if (err != cudaSuccess) return err;
  return pdl::launch_ex(kernel, dim3(kSeV5Cluster, (p.N + images - 1) / images), dim3(threads), smem, stream,
                        dim3(kSeV5Cluster, 1, 1), pdl && pdl::device_supports(dev), p);
}

}  // namespace

cudaError_t launch_se_v5(const Params& p, cudaStream_t stream, bool pdl) {
  if (!se_v5_fits(p)) return cudaErrorInvalidValue;
  if (se_v5_images() == 4) {
    static DeviceSlots slots4;
    return launch_se_cluster(se_v5_kernel<4>, slots4, SeV5Layout(p.hidden, p.sq, 4).floats * 4, kSeV5Threads, p,
                             stream, pdl, 4);
  }
  static DeviceSlots slots;
  return launch_se_cluster(se_v5_kernel<>, slots, SeV5Layout(p.hidden, p.sq).floats * 4, kSeV5Threads, p, stream, pdl);
}

cudaError_t launch_se_v6(const Params& p, cudaStream_t stream, bool pdl) {
  if (!se_v6_fits(p)) return cudaErrorInvalidValue;
  static DeviceSlots slots;
  return launch_se_cluster(se_v6_kernel, slots, SeV6Layout(p.hidden, p.sq).floats * 4, kSeV6Threads, p, stream, pdl);
}

}  // namespace mb
