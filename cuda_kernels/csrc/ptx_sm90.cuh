// Thin wrappers over the Hopper (sm_90) PTX the wgmma FFN kernel uses: mbarriers with
// transaction counts, the bulk copy engine (global -> shared, completing on an mbarrier),
// proxy fences, named barriers, and the warpgroup-MMA fence / commit / wait and shared-memory
// matrix descriptors (sm_90a). See the PTX ISA, "Asynchronous warpgroup level matrix
// multiply-accumulate" and "mbarrier".
#pragma once
#include <cstdint>

// The mbarrier, bulk-copy and proxy-fence wrappers below exist on sm_90 and newer. An extension built for sm_80 as
// well (the MBConv one) still compiles the kernels that call them; there the wrappers trap, and those kernels'
// launchers refuse a device older than compute capability 9.0 before they launch one.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define BF_SM90 1
#else
#define BF_SM90 0
#endif

namespace bf {

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
#if BF_SM90
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#else
  __trap();
#endif
}

// Makes the initialised barriers visible to the async proxy (the copy engine).
__device__ __forceinline__ void fence_barrier_init() {
#if BF_SM90
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
#if BF_SM90
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#else
  __trap();
#endif
}

// Arrives and announces `bytes` more to come from the copy engine in the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#if BF_SM90
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#else
  __trap();
#endif
}

// Waits until the phase of parity `parity` has completed. A fresh barrier is in phase 0,
// so waiting on parity 1 returns at once (the "previous" phase counts as completed).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#if BF_SM90
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
#else
  __trap();
#endif
}

// One contiguous bulk copy global -> shared, completing `bytes` on mbarrier `bar`.
// dst, src and bytes must be multiples of 16.
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
#if BF_SM90
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar)
               : "memory");
#else
  __trap();
#endif
}

// One box of a 2-D tensor map global -> shared (cp.async.bulk.tensor), completing its bytes on mbarrier `bar`;
// (c0, c1) is the box's first element, innermost coordinate first. Elements outside the tensor arrive as zeros and
// count toward the bytes. `map` is the address of a __grid_constant__ CUtensorMap kernel parameter.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* map, int c0, int c1, uint32_t bar) {
#if BF_SM90
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
#else
  __trap();
#endif
}

// Orders this thread's generic-proxy shared-memory writes (st.shared, cp.async) before
// later async-proxy reads (wgmma operands, bulk copies).
__device__ __forceinline__ void fence_proxy_async_smem() {
#if BF_SM90
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  __trap();
#endif
}

// Asks L2 to fetch `bytes` (a multiple of 16) of global memory from `src` (16-byte aligned), one contiguous request;
// nothing waits for it (a hint: later loads of the range may find it in L2).
__device__ __forceinline__ void bulk_prefetch_l2(const void* src, uint32_t bytes) {
#if BF_SM90
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
#else
  __trap();
#endif
}

// Barrier over `threads` threads (a multiple of 32) under hardware barrier `id` (1..15).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- warpgroup MMA and register reallocation (sm_90a) ----

// Every warp of a warpgroup must execute these; they take effect only in a kernel with a
// register cap at entry (__launch_bounds__(threads, 1)).
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from moving accesses of accumulator registers across wgmma issue and
// wait points (the registers are written asynchronously).
template <int N>
__device__ __forceinline__ void fence_registers(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_registers(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

// Descriptor of a K-major operand tile stored as 128-byte rows with the 128-byte swizzle
// (16-byte chunk index XOR row % 8, the layout of panel_offset), 8-row groups 1024 bytes
// apart. `addr` is the shared address of the first row plus 32 bytes per 16-wide k step;
// the tile's 1024-byte blocks must be 1024-aligned.
__device__ __forceinline__ uint64_t smem_desc_sw128(uint32_t addr) {
  uint64_t d = (addr & 0x3FFFF) >> 4;  // start address, 16-byte units
  d |= uint64_t(1) << 16;              // leading byte offset: unused for swizzled K-major
  d |= uint64_t(1024 >> 4) << 32;      // stride byte offset: next 8-row group
  d |= uint64_t(1) << 62;              // layout: 128-byte swizzle
  return d;
}

// smem_desc_sw128(addr + bytes) from d = smem_desc_sw128(addr), for a 16-byte multiple `bytes`: shared addresses stay
// below 256 KB, so the start address field never carries. Built once from a warp-uniform address, d stays in uniform
// registers and each wgmma's descriptor is one uniform add (no R2UR, no mask and shift per operand; NOTES.md "Session 9").
__device__ __forceinline__ uint64_t desc_advance(uint64_t d, uint32_t bytes) { return d + (bytes >> 4); }

}  // namespace bf
