// Why the early projections stream D at ~2 TB/s (NOTES.md, "Session 19: the projections' read pattern"): the read
// pattern of project_v9t (each warp copies its next 16-row task, 16 x hidden halves, one contiguous range, with 16-byte
// cp.async into its own ring in shared memory, then computes it) against plain streaming reads of the same bytes, and
// against the same tasks by one bulk copy each (cp.async.bulk on an mbarrier per slot), with and without the
// projection's writes (16 x C_out halves a task) and shortcut reads. No tensor cores: what is left is the memory
// system's side. A standalone program (no PyTorch); on the GPU machine:
//   nvcc -std=c++17 -O3 -arch=sm_90a -Icuda_kernels/csrc cuda_kernels/probes/probe_stream.cu -o /tmp/probe_stream
//   /tmp/probe_stream            (one line per case: bytes moved, median time of 15 with L2 flushed, GB/s)
#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

#include "probe_common.cuh"  // CHECK
#include "ptx.cuh"
#include "ptx_sm90.cuh"

struct Job {
  const uint4* d;    // tasks x per 16-byte pieces
  const uint4* res;  // tasks x out_per pieces (shortcut), or null
  uint4* out;        // tasks x out_per pieces, or null
  long long tasks;
  int per, out_per;  // 16-byte pieces a task reads from d, writes to out
  unsigned* sink;    // written only if the XOR of everything read is a magic value (keeps the loads)
};

// Every thread streams 16-byte pieces, grid-stride, four loads in flight.
__global__ void read_plain(const uint4* d, long long n, unsigned* sink) {
  unsigned acc = 0;
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = __ldcs(d + i), b = __ldcs(d + i + stride), c = __ldcs(d + i + 2 * stride),
                e = __ldcs(d + i + 3 * stride);
    acc ^= a.x ^ b.y ^ c.z ^ e.w;
  }
  for (; i < n; i += stride) acc ^= __ldcs(d + i).x;
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

// The task's epilogue stand-in: the shortcut read and the output written, a task's out_per pieces over the lanes.
__device__ __forceinline__ unsigned task_writes(const Job& j, long long task, int lane, unsigned acc) {
  if (j.out == nullptr) return acc;
  for (int i = lane; i < j.out_per; i += 32) {
    uint4 v = j.res ? __ldcs(j.res + task * j.out_per + i) : make_uint4(acc, 0, 0, 0);
    v.x ^= acc;
    __stcs(j.out + task * j.out_per + i, v);
  }
  return acc;
}

// project_v9t's loader: warp w's tasks w, w + step, ...; SLOTS tasks of the warp in flight (v9t: 2).
template <int SLOTS>
__global__ void tasks_cp_async(Job j) {
  extern __shared__ __align__(16) uint4 ring[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  uint4* mine = ring + (size_t)warp * SLOTS * j.per;
  const long long step = (long long)gridDim.x * warps;
  long long task = blockIdx.x * (long long)warps + warp;
  auto issue = [&](long long tk, int slot) {
    if (tk < j.tasks)
      for (int i = lane; i < j.per; i += 32)
        bf::cp_async16(bf::smem_addr(mine + slot * j.per + i), j.d + tk * j.per + i, true);
    bf::cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < SLOTS - 1; ++s) issue(task + s * step, s);
  unsigned acc = 0;
  for (int k = 0; task < j.tasks; ++k, task += step) {
    issue(task + (SLOTS - 1) * step, (k + SLOTS - 1) % SLOTS);
    bf::cp_async_wait<SLOTS - 1>();
    __syncwarp();
    const uint4* slot = mine + (k % SLOTS) * j.per;
    for (int i = lane; i < j.per; i += 32) acc ^= slot[i].x;  // the unit loads' stand-in
    acc = task_writes(j, task, lane, acc);
    __syncwarp();  // every lane has read the slot before it is refilled
  }
  bf::cp_async_wait<0>();
  if (acc == 0x9e3779b9u) j.sink[0] = acc;
}

// The same tasks, one bulk copy each (lane 0), completing on the slot's mbarrier.
template <int SLOTS>
__global__ void tasks_bulk(Job j) {
  extern __shared__ __align__(16) uint4 ring[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  uint64_t* bars = reinterpret_cast<uint64_t*>(ring + (size_t)warps * SLOTS * j.per) + warp * SLOTS;
  uint4* mine = ring + (size_t)warp * SLOTS * j.per;
  if (lane < SLOTS) bf::mbar_init(bf::smem_addr(bars + lane), 1);
  bf::fence_barrier_init();
  __syncwarp();
  const long long step = (long long)gridDim.x * warps;
  long long task = blockIdx.x * (long long)warps + warp;
  auto issue = [&](long long tk, int slot) {
    if (lane == 0 && tk < j.tasks) {
      bf::fence_proxy_async_smem();  // the lanes' reads of the slot before the copy engine's writes
      const uint32_t bar = bf::smem_addr(bars + slot), bytes = (uint32_t)j.per * 16;
      bf::mbar_arrive_expect_tx(bar, bytes);
      bf::bulk_copy_g2s(bf::smem_addr(mine + slot * j.per), j.d + tk * j.per, bytes, bar);
    }
  };
#pragma unroll
  for (int s = 0; s < SLOTS - 1; ++s) issue(task + s * step, s);
  unsigned acc = 0;
  for (int k = 0; task < j.tasks; ++k, task += step) {
    issue(task + (SLOTS - 1) * step, (k + SLOTS - 1) % SLOTS);
    bf::mbar_wait(bf::smem_addr(bars + k % SLOTS), (k / SLOTS) & 1);
    const uint4* slot = mine + (k % SLOTS) * j.per;
    for (int i = lane; i < j.per; i += 32) acc ^= slot[i].x;
    acc = task_writes(j, task, lane, acc);
    __syncwarp();
  }
  if (acc == 0x9e3779b9u) j.sink[0] = acc;
}

struct Buffers {
  uint4 *d, *res, *out, *flush;
  unsigned* sink;
  size_t flush_bytes;
};

// Median of `reps` launches, each after an L2 flush (a 256 MB memset, untimed).
template <typename Launch>
float time_ms(const Buffers& b, Launch launch, int reps = 15) {
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  std::vector<float> ms;
  for (int r = 0; r < reps + 3; ++r) {
    CHECK(cudaMemsetAsync(b.flush, r & 0xff, b.flush_bytes));
    CHECK(cudaEventRecord(t0));
    launch();
    CHECK(cudaEventRecord(t1));
    CHECK(cudaEventSynchronize(t1));
    CHECK(cudaGetLastError());
    float m = 0.f;
    CHECK(cudaEventElapsedTime(&m, t0, t1));
    if (r >= 3) ms.push_back(m);
  }
  std::sort(ms.begin(), ms.end());
  CHECK(cudaEventDestroy(t0));
  CHECK(cudaEventDestroy(t1));
  return ms[ms.size() / 2];
}

template <typename Kernel>
void run_tasks(const char* name, Kernel kernel, int slots, const Buffers& b, long long tasks, int per, int out_per,
               bool writes, int warps, int extra_smem, int sms) {
  Job j{b.d, writes ? b.res : nullptr, writes ? b.out : nullptr, tasks, per, out_per, b.sink};
  const int smem = warps * slots * per * 16 + warps * slots * 8 + extra_smem;  // ring, the bulk kernel's mbarriers
  int per_sm = 0, optin = 0;  // a ring over the most a CTA may have cannot be asked for (s20 call 1 stopped there)
  CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  if (smem <= optin) {
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, warps * 32, smem));
  }
  if (per_sm == 0) {
    std::printf("%-10s slots %d warps %2d task %5d B: does not fit (%d B of shared memory)\n", name, slots, warps,
                per * 16, smem);
    return;
  }
  const int grid = (int)std::min<long long>((tasks + warps - 1) / warps, (long long)per_sm * sms);
  const float ms = time_ms(b, [&] { kernel<<<grid, warps * 32, smem>>>(j); });
  const double bytes = (double)tasks * per * 16 + (writes ? 2.0 * tasks * out_per * 16 : 0.0);
  std::printf("%-10s slots %d warps %2d task %5d B%s: %d CTAs/SM, %6.1f MB in %7.1f us = %6.0f GB/s\n", name, slots,
              warps, per * 16, writes ? " +out+res" : "         ", per_sm, bytes / 1e6, ms * 1e3, bytes / ms / 1e6);
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s: %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  const long long P = 128LL * 56 * 56;  // B0's 2.1: 128 images of 56 x 56
  const int c_out = 24;
  Buffers b{};
  b.flush_bytes = 256u << 20;
  const size_t d_bytes = (size_t)P * 240 * 2, out_bytes = (size_t)P * c_out * 2;  // room for hidden 240
  CHECK(cudaMalloc(&b.d, d_bytes));
  CHECK(cudaMalloc(&b.res, out_bytes));
  CHECK(cudaMalloc(&b.out, out_bytes));
  CHECK(cudaMalloc(&b.flush, b.flush_bytes));
  CHECK(cudaMalloc(&b.sink, 64));
  CHECK(cudaMemset(b.d, 1, d_bytes));
  CHECK(cudaMemset(b.res, 2, out_bytes));
  const int sms = prop.multiProcessorCount;
  for (int hidden : {144, 240}) {  // 2.1 (project_v9t<3>, 2 CTAs of 8 warps an SM), 3.1-like (<5>, 1 CTA)
    const long long tasks = P / 16;
    const int per = 16 * hidden * 2 / 16, out_per = 16 * c_out * 2 / 16;
    const long long n = tasks * per;
    const float ms = time_ms(b, [&] { read_plain<<<sms * 8, 256>>>(b.d, n, b.sink); });
    std::printf("hidden %d: D %.1f MB; plain reads (%d x 256 threads, 4 x 16 B in flight each): %.1f us = %.0f GB/s\n",
                hidden, n * 16 / 1e6, sms * 8, ms * 1e3, n * 16 / ms / 1e6);
    const int v_smem = c_out * (((hidden + 63) / 64) * 64 + 16) * 2;  // project_v9's V in shared memory
    for (bool writes : {false, true}) {
      run_tasks("cp.async", tasks_cp_async<2>, 2, b, tasks, per, out_per, writes, 8, v_smem, sms);  // v9t
      run_tasks("cp.async", tasks_cp_async<3>, 3, b, tasks, per, out_per, writes, 8, v_smem, sms);
      run_tasks("cp.async", tasks_cp_async<4>, 4, b, tasks, per, out_per, writes, 8, v_smem, sms);
      run_tasks("cp.async", tasks_cp_async<2>, 2, b, tasks, per, out_per, writes, 4, v_smem, sms);
      run_tasks("bulk", tasks_bulk<2>, 2, b, tasks, per, out_per, writes, 8, v_smem, sms);
      run_tasks("bulk", tasks_bulk<3>, 3, b, tasks, per, out_per, writes, 8, v_smem, sms);
      run_tasks("bulk", tasks_bulk<4>, 4, b, tasks, per, out_per, writes, 8, v_smem, sms);
      run_tasks("bulk", tasks_bulk<2>, 2, b, tasks, per, out_per, writes, 4, v_smem, sms);
    }
  }
  return 0;
}
