// The tile-config space of the MoE expert GEMMs, pruned before anything compiles: the kernel's own
// rules (divisibility, accumulators per thread), the device's shared-memory limit, the layer's
// widths, and relevance for the batch (block_m near the rows each expert gets). Swap-AB tiles are
// candidates for block_m <= 32 where the layer can run them (block_m 8: theirs alone). Split-K is
// chosen at launch (GemmTile::split_k = 0), not searched.
#pragma once

#include <string>
#include <vector>

#include "autotune/moe_heuristic.h"
#include "runtime/moe_spec.h"

namespace moejit {

struct DeviceLimits {
  int max_shared_optin = 227 * 1024;  // bytes one CTA may use after opting in
  std::string arch = "sm_90a";
};

// block_m values worth timing for num_tokens: around the expected rows per local expert.
// On sm_90a (arch) 64 is always a candidate: the persistent wgmma kernel's deep ring streams
// weights well even where most of its 64 rows are padding (Mixtral-8x7B at M = 128 on an H200:
// 738 us against 1030 for the best shared-memory tile).
std::vector<int> candidate_block_ms(const MoeSpec& spec, int num_tokens, const std::string& arch = "");

// Valid tiles for GEMM1 (gemm1 = true) or GEMM2 of the layer at block_m, best-guess first.
std::vector<GemmTile> candidate_tiles(const MoeSpec& spec, int block_m, bool gemm1, const DeviceLimits& limits);

// Rows per column sweep worth timing for a wgmma tile's grouped walk (GemmTile::walk_rows) on a
// device of sm_count SMs, the default (0) aside: 4, 16, 32, and the divisors of sm_count in
// (8, 24] (a group that divides the persistent grid keeps each CTA's partners over the walk).
std::vector<int> candidate_walk_rows(int sm_count);

// The heuristic's tiles for a given block_m (the tuner's starting point for that block_m).
MoeTileConfig heuristic_config_for_block_m(const MoeSpec& spec, int block_m, const std::string& arch = "");

// True when the config passes the kernel's rules and the device limits.
bool config_fits(const MoeSpec& spec, const MoeTileConfig& config, const DeviceLimits& limits, std::string* why = nullptr);

}  // namespace moejit
