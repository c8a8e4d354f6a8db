// The sections of moejit_bench and what they share.
#pragma once

#include <cuda.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "runtime/device_fill.h"
#include "runtime/moe_spec.h"
#include "runtime/runtime.h"

namespace moejit::bench {

struct BenchShape {
  std::string name;
  MoeSpec spec;
};

struct Context {
  CUstream stream = nullptr;
  DeviceFiller* filler = nullptr;
  double bandwidth = 0;  // bytes/s, copy (read + write)
  double gemm_rate = 0;  // flop/s, dense bf16; 0 = not measured
  std::vector<int> token_counts;
  int reps = 20;
};

void bench_routing(Runtime& rt, const Context& ctx, const std::vector<BenchShape>& shapes, nlohmann::json& results);
void bench_moe(Runtime& rt, const Context& ctx, const std::vector<BenchShape>& shapes, nlohmann::json& results);

}  // namespace moejit::bench
