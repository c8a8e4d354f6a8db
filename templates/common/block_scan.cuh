// Block-wide exclusive prefix sum, one value per thread, via warp shuffles. Device-only.
#pragma once

namespace moejit {

// Returns the exclusive prefix of `value` over threads 0..threadIdx.x-1 and writes the block total
// to *total. T is int, or unsigned long long to scan two packed 32-bit sums in one pass (neither
// may carry past 32 bits). `scratch` holds THREADS/32 + 1 values of shared memory. All threads
// must call it.
template <int THREADS, typename T = int>
__device__ inline T block_exclusive_sum(T value, T* scratch, T* total) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "block scan needs whole warps, at most 32");
  constexpr int kWarps = THREADS / 32;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  T inclusive = value;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const T up = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += up;
  }
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    T warp_total = lane < kWarps ? scratch[lane] : T(0);
    T warp_inclusive = warp_total;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const T up = __shfl_up_sync(0xffffffffu, warp_inclusive, offset);
      if (lane >= offset) warp_inclusive += up;
    }
    if (lane < kWarps) scratch[lane] = warp_inclusive - warp_total;  // exclusive warp base
    if (lane == kWarps - 1) scratch[kWarps] = warp_inclusive;
  }
  __syncthreads();
  *total = scratch[kWarps];
  return scratch[warp] + inclusive - value;
}

}  // namespace moejit
