// Per-tile readiness counters between two kernels of one forward: a producer kernel's CTAs (or
// warps) publish each piece of a tile they finished with release(); a consumer kernel launched
// under the producer's tail (programmatic dependent launch) waits for its own tile's count with
// wait_for() instead of the whole producer grid (pdl::wait), so that its CTAs start on the tiles
// that are done while the producer's last wave still runs. Deadlock-free only because a consumer
// grid launches after every producer CTA has started (each producer CTA calls
// pdl::launch_dependents() first): every piece it waits for is resident or done. The counters are
// zero at the producer's launch (the routing or a memset zeroes them with the fp32 accumulator).
// Device code of the sm_80+ kernels only (no fallback: the families refuse older targets).
#pragma once

namespace moejit {
namespace tile_flags {

// Adds `n` to *flag after the caller's earlier writes, and the writes of threads ordered before it
// by a barrier, are visible to the GPU: a release add (no acquire half: fence.acq_rel would also
// drop the SM's L1 lines, which the CTAs beside this one read their activations from).
__device__ inline void release(int* flag, int n) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(flag), "r"(n) : "memory");
}

// Spins (one thread) until *flag >= target, then acquires once (a fence): the polls are relaxed
// loads, since an acquire load at GPU scope also drops the SM's L1 lines (which the CTAs beside
// this one read their activations from) at every poll. The caller then makes the other threads
// wait at a barrier. A count that never arrives (a host bug) traps after 2^24 polls (seconds: a
// poll is an L2 round trip and a 64 ns sleep) instead of hanging the GPU (seen when a test
// template left GEMM1's release out).
__device__ inline void wait_for(const int* flag, int target) {
  for (long long spin = 0;; ++spin) {
    int v;
    asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
    if (v >= target) break;
    if (spin > (1LL << 24)) __trap();
    if (spin > 64) __nanosleep(64);
  }
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

}  // namespace tile_flags
}  // namespace moejit
