// Host side of routing_sort: validates a configuration, lays out its outputs in one caller-given
// workspace and launches count -> scan -> scatter on the caller's stream. No allocation and no host
// synchronization in run(), so it can be captured into a CUDA graph.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <memory>

#include "jit/kernel_spec.h"
#include "runtime/routing_reference.h"
#include "templates/routing/routing_sort_args.cuh"

namespace moejit {

class Runtime;
class Module;

struct RoutingSortConfig {
  int num_experts = 0;         // E (global)
  int top_k = 0;
  int block_m = 64;            // GEMM tile rows each expert is padded to
  int num_local_experts = -1;  // -1 = E (no expert parallelism); else expert_map is required
  int tokens_per_cta = 32;
  int min_block_m = 0;         // smallest block_m a run may ask for (tile map capacity); 0 = block_m
};

// Device pointers into the workspace; valid counts are in `totals` (device memory).
struct RoutingSortBuffers {
  int* cta_counts = nullptr;
  int* expert_counts = nullptr;
  int* expert_offsets = nullptr;
  int* padded_offsets = nullptr;
  int* gather_index = nullptr;
  int* scatter_index = nullptr;
  int* tile_expert = nullptr;
  int* tile_rows = nullptr;
  int* totals = nullptr;       // [kRoutingTotals] routed rows, padded rows, tiles, work queue counters
  int* cta_flags = nullptr;    // [count CTAs] workspace: each CTA's error bits
  int* error_flags = nullptr;  // [1] RoutingErrorFlags
};

class RoutingSorter {
 public:
  static constexpr int kMaxExperts = 1024;  // key encoding and one-CTA scan

  RoutingSorter(Runtime& runtime, RoutingSortConfig config);  // throws Error(Validate)
  const RoutingSortConfig& config() const { return config_; }
  KernelSpec spec(const std::string& arch) const { return spec_for(config_, arch); }
  static KernelSpec spec_for(const RoutingSortConfig& config, const std::string& arch);

  // Output capacities for up to max_tokens tokens.
  std::size_t gather_capacity(int max_tokens) const;  // padded rows
  std::size_t max_tiles(int max_tokens) const;
  std::size_t workspace_bytes(int max_tokens) const;
  RoutingSortBuffers carve(CUdeviceptr workspace, int max_tokens) const;

  void prepare();  // compile + load now instead of at the first run
  // topk_ids: [num_tokens, top_k] int32 on the device; expert_map: [E] int32 or 0 for identity.
  // `buffers` must come from carve() with max_tokens >= num_tokens.
  // Copies the outputs of a finished run back (synchronizes the context): for tests and the demo.
  RoutingSortReference download(const RoutingSortBuffers& buffers, int num_tokens) const;

  // block_m (0 = the config's) pads each expert to a smaller tile for this run, within
  // [min_block_m, block_m]: the capacities were sized for that range.
  void run(CUstream stream, CUdeviceptr topk_ids, CUdeviceptr expert_map, int num_tokens, int max_tokens,
           const RoutingSortBuffers& buffers, int block_m = 0);
  // The kernels' arguments for such a run, validated (run() launches with these; the fused
  // routing kernels embed them).
  RoutingSortArgs make_args(CUdeviceptr topk_ids, CUdeviceptr expert_map, int num_tokens, int max_tokens,
                            const RoutingSortBuffers& buffers, int block_m) const;
  // The scan and scatter stages, after a count stage (run()'s own, or routing_fused's topk_rank
  // with the same tokens_per_cta) left per-CTA counts and ranks in the workspace.
  void finish(CUstream stream, const RoutingSortArgs& args);

 private:
  RoutingSortBuffers layout(CUdeviceptr workspace, int max_tokens, std::size_t* total_bytes) const;

  Runtime& runtime_;
  int threads_ = 0;  // count kernel's CTA
  int padded_ = 0;   // its key block width
  bool overlap_launches_ = false;  // programmatic dependent launch of scan and scatter (sm_90+)
  RoutingSortConfig config_;
  std::shared_ptr<const Module> module_;
};

}  // namespace moejit
