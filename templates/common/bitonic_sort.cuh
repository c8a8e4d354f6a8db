// Block-wide bitonic sort of N keys in shared memory. N must be a power of two: callers pad their
// key count up to it (masked keys sort last). Device-only; compiles under NVRTC with no host headers.
#pragma once

namespace moejit {

// Sorts keys[0, N) ascending. All THREADS threads of the block must call it. Ends with a barrier.
template <int N, int THREADS>
__device__ inline void block_bitonic_sort(unsigned int* keys) {
  static_assert(N > 0 && (N & (N - 1)) == 0, "bitonic sort needs a power-of-two width");
  for (int size = 2; size <= N; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      for (int i = threadIdx.x; i < N / 2; i += THREADS) {
        const int lo = 2 * i - (i & (stride - 1));  // pair (lo, lo + stride) inside a 2*stride group
        const int hi = lo + stride;
        const bool ascending = (lo & size) == 0;    // alternate directions build bitonic runs
        const unsigned int a = keys[lo];
        const unsigned int b = keys[hi];
        if ((a > b) == ascending) {
          keys[lo] = b;
          keys[hi] = a;
        }
      }
    }
  }
  __syncthreads();
}

}  // namespace moejit
