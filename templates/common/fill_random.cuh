// fill_random: out[i] = scale * u(seed, i), u uniform in [-1, 1) from a counter-based hash, as
// DTYPE (bf16, f16) or fp32. Fills benchmark and tuning buffers on the device in one pass, so
// large weights never cross PCIe and are never zeros.
#pragma once

#include "common/fill_random_args.cuh"
#include "common/mma_sm80.cuh"

namespace moejit {

__device__ inline unsigned long long fill_hash(unsigned long long x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <int OUT_TYPE>
__global__ void __launch_bounds__(256) fill_random_kernel(const FillRandomArgs args) {
  for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < args.count; i += gridDim.x * 256ull) {
    const unsigned long long h = fill_hash(args.seed * 0x100000001b3ull + i);
    const float u = static_cast<float>(h >> 40) * (1.f / 8388608.f) - 1.f;  // 24 bits -> [-1, 1)
    const float v = args.scale * u;
    if constexpr (OUT_TYPE == kFillF32) {
      static_cast<float*>(args.out)[i] = v;
    } else {
      static_cast<unsigned short*>(args.out)[i] = sm80::from_float<OUT_TYPE>(v);
    }
  }
}

}  // namespace moejit
