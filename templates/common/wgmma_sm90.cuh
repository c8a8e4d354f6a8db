// sm_90a warpgroup MMA (wgmma): shared-memory matrix descriptors, the fence / commit / wait
// protocol, and the async-proxy fence that orders ordinary (cp.async) shared-memory writes before
// the tensor cores read them. The mma wrappers themselves are generated (wgmma_sm90_ops.cuh). Only
// for sm_90a (wgmma is not in plain sm_90 nor in sm_100): MOEJIT_HAS_WGMMA says whether this
// compilation has it.
#pragma once

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MOEJIT_HAS_WGMMA 1
#else
#define MOEJIT_HAS_WGMMA 0
#endif

namespace moejit {
namespace sm90 {

// Descriptor of a K-major tile whose rows are 128 bytes, stored with the 128-byte swizzle (16-byte
// chunk c of row r at chunk c ^ (r % 8); 8-row atoms of 1024 bytes, 1024-byte aligned): start address
// / 16 in bits 0-13, leading offset unused (0) for this layout, stride between 8-row groups 1024 / 16
// in bits 32-45, swizzle mode 1 (128 B) in bits 62-63. A k step of 16 bf16 (32 bytes) inside the
// atom adds 2 to the start address.
__device__ inline unsigned long long sw128_desc(unsigned smem_address) {
  return static_cast<unsigned long long>((smem_address & 0x3FFFF) >> 4) | (static_cast<unsigned long long>(1024 >> 4) << 32) |
         (1ull << 62);
}

#if MOEJIT_HAS_WGMMA
// Orders this warpgroup's register accesses before the wgmmas that follow.
__device__ inline void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed groups of this warpgroup are still running.
template <int N>
__device__ inline void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accesses of an accumulator across the async wgmma window.
__device__ inline void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
// Generic-proxy shared-memory writes (st.shared, cp.async) made visible to the async proxy (wgmma).
__device__ inline void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Bulk copies shared -> global (the copy engine; 16-byte aligned ends, a multiple of 16 bytes),
// tracked per thread by bulk groups: plain, or added element-wise into fp32 global memory.
__device__ inline void bulk_store(void* dst, unsigned src, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes) : "memory");
}
__device__ inline void bulk_add_f32(float* dst, unsigned src, unsigned bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
               "r"(bytes)
               : "memory");
}
__device__ inline void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until this thread's bulk copies have read their shared-memory sources.
__device__ inline void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }

// mbarriers (shared memory, 8 bytes each) for producer / consumer rings. A barrier's phase
// completes when its count of arrivals is in; wait(parity) returns once the phase of that parity
// has completed (on a fresh barrier, parity 1 counts as completed: the slot starts free).
__device__ inline void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ inline void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ inline void mbar_wait(unsigned bar, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ inline void mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Arrives on bar once every cp.async this thread issued so far has landed (counts against the
// barrier's expected arrivals).
__device__ inline void cp_async_mbar_arrive(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Arrives on bar (one of its expected arrivals) and adds `bytes` to the transfer it waits for: the
// bulk tensor copies that complete on bar count their bytes down.
__device__ inline void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Bulk tensor copy (TMA) of the box at coordinates (c0, c1, c2) of the 3-d tensor map `tmap` (a
// CUtensorMap in parameter / constant / global memory) into shared memory at dst, completing on
// bar. Out-of-range elements land as zeros; the box's bytes count against bar either way.
__device__ inline void tma_load_3d(unsigned dst, const void* tmap, int c0, int c1, int c2, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
// The same copy multicast: the box lands at dst in every CTA of the cluster that cta_mask names (bit
// r: rank r), and counts its bytes on the barrier at bar's offset in each of them.
__device__ inline void tma_load_3d_multicast(unsigned dst, const void* tmap, int c0, int c1, int c2, unsigned bar,
                                             unsigned short cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
      "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "h"(cta_mask)
      : "memory");
}
// Arrives on the barrier at bar's shared-memory offset in CTA `rank` of this cluster. Release at CTA
// scope (as CUTLASS's ClusterBarrier::arrive): the callers free ring slots whose wgmma reads they
// have waited for. A cluster-scope release put a memory barrier (MEMBAR + ERRBAR) before every
// arrival: 43% of the multicast GEMM1's stall samples on an H100 (Mixtral-8x7B, M = 4096).
__device__ inline void mbar_arrive_cluster(unsigned bar, unsigned rank) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}
// Every thread of every CTA of the cluster (warps converged) meets here; shared-memory accesses
// before it are visible to the cluster after it.
__device__ inline void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ inline void prefetch_tensor_map(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(tmap) : "memory");
}
// Barrier `id` (1..15; 0 is __syncthreads) among `count` threads (whole warps).
__device__ inline void named_barrier(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
// Per-warpgroup register budget (the kernel needs a register cap at entry: __launch_bounds__).
template <int N>
__device__ inline void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ inline void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

#include "common/wgmma_sm90_ops.cuh"
#endif

}  // namespace sm90
}  // namespace moejit
