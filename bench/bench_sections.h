// The sections of moejit_bench and what they share.
#pragma once

#include <cuda.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "autotune/moe_heuristic.h"
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
  double gemm_rate = 0;      // flop/s, dense bf16; 0 = not measured
  double fp8_gemm_rate = 0;  // flop/s, dense fp8 e4m3 (the math ceiling of w8a8 layers); 0 = not measured
  std::vector<int> token_counts;
  int reps = 20;
  // --swap-ab WNxWKxS: decode batches (<= 32 rows per expert) run both GEMMs on these swap-AB tiles
  // instead of the layer's own choice (A/B against the tuned or heuristic configs).
  std::optional<GemmTile> swap_ab;
  // --gemv on|off: batches the layer's decode GEMV takes (decode_gemv_supported, at most
  // decode_gemv_max_tokens) run on it (on), or never (off: the heuristic's tiles without it, where the
  // layer's own choice was the GEMV); A/B of the DB's or heuristic's GEMV buckets without a user DB.
  std::optional<bool> gemv;
  // --block-m N: with --swap-ab, the tiles' tokens (routing block_m) instead of the rows per expert
  // rounded up to 8 / 16 / 32; wgmma tiles take up to 64 rows per expert.
  std::optional<int> block_m;
  // --walk-rows N: the wgmma tiles of every batch walk N row tiles per column sweep (0: the default
  // walk) instead of the config's own (A/B of GemmTile::walk_rows).
  std::optional<int> walk_rows;
  // --pingpong: persistent wgmma tiles that can (GemmTile::pingpong: block_m 64, unstaged) run with
  // ping-pong consumer groups (A/B against the config's own).
  bool pingpong = false;
  // --pregather: persistent wgmma GEMM1 tiles read X gathered beforehand into padded-row order
  // (GemmTile::pregather; where the workspace holds the copy: prefill batches).
  bool pregather = false;
  // --multicast: persistent wgmma GEMM1 tiles that can (GemmTile::multicast: gated activations)
  // multicast their weight tiles over clusters of two CTAs.
  bool multicast = false;
  // --gemm2-split N: GEMM2 splits k N ways, its top-k sum by fp32 adds (TopkSum::Atomic; a staged
  // tile whose fp32 rows do not fit runs unstaged), A/B of GemmTile::split_k against the config's own.
  std::optional<int> gemm2_split;
  // --balanced: router logits that give every expert the same row count (bench_moe.cpp) instead of
  // random ones (how much the expert row tiles' padding costs).
  bool balanced = false;
};

void bench_routing(Runtime& rt, const Context& ctx, const std::vector<BenchShape>& shapes, nlohmann::json& results);
void bench_moe(Runtime& rt, const Context& ctx, const std::vector<BenchShape>& shapes, nlohmann::json& results);

}  // namespace moejit::bench
