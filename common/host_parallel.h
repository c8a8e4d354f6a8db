// Host helpers for reproducible test data and CPU references: a counter-based 64-bit mix
// (splitmix64) and a parallel loop over indices. What each index computes never depends on the
// thread count, so generated data and references are the same on every machine.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace moejit {

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// body(i) for every i in [0, count), indices interleaved over at most 16 threads (and at most one
// per index).
template <class F>
void parallel_for(std::int64_t count, F&& body) {
  const std::int64_t threads =
      std::max<std::int64_t>(1, std::min<std::int64_t>({16, std::thread::hardware_concurrency(), count}));
  std::vector<std::thread> pool;
  for (std::int64_t w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      for (std::int64_t i = w; i < count; i += threads) body(i);
    });
  for (auto& t : pool) t.join();
}

}  // namespace moejit
