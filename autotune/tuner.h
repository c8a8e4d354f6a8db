// MoeTuner: times tile configs of one MoE layer shape on the GPU and picks the fastest per batch.
// Per batch M: the block_m candidates (each with the heuristic's tiles for it), then GEMM1's tiles
// at the best block_m, then GEMM2's; the heuristic's own config is always timed, so the result is
// never slower than the fallback (within noise). Candidates compile in parallel in the background
// while the GPU times the ready ones; one that fails to compile, launch or write its whole output
// is skipped and logged, never fatal.
//
// Timing: CUDA events, warm-up, median of `reps` (>= 10) runs; the weights are copied until they
// exceed twice the L2 and every forward reads the next copy; router logits rotate over four sets,
// half of them random and half skewed (a few experts favoured); M <= 16 is timed as CUDA-graph
// replays. The objective is the mean over the two distributions.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autotune/moe_heuristic.h"
#include "autotune/tuned_db.h"
#include "runtime/moe_spec.h"

namespace moejit {

class Runtime;

struct TuneOptions {
  // Every power of two up to 8192: a batch halfway (in log2) between two buckets takes the smaller
  // one's config, and without 512 and 2048 those ran on configs tuned for half their size (H200,
  // MXFP4 gpt-oss-120b M = 512: 3566 us on the M = 256 config, 1506 us tuned).
  std::vector<int> batches = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
  double budget_s = 0;  // 0 = no limit; past it, remaining candidates are skipped (best so far kept)
  int reps = 10;
  // Called after every timed candidate (for progress bars).
  std::function<void(int done, int total_estimate, double elapsed_s, const std::string& what)> progress;
};

struct TuneResult {
  int m = 0;
  MoeTileConfig config;          // fastest found
  double us = 0;
  MoeTileConfig heuristic;
  double heuristic_us = 0;
  double floor_us = 0;           // max(bytes / bandwidth, flops / GEMM rate), measured ceilings,
                                 // over the experts the four logit sets touch (mean)
  int timed = 0, skipped = 0;    // candidates
};

class MoeTuner {
 public:
  MoeTuner(Runtime& runtime, MoeSpec spec, TuneOptions options);
  ~MoeTuner();
  std::vector<TuneResult> run();                        // needs a GPU
  TunedDb to_db(const std::vector<TuneResult>& results);  // with this machine's metadata
  double bandwidth() const { return bandwidth_; }
  double gemm_rate() const { return gemm_rate_; }

 private:
  struct Buffers;
  double time_config(int m, const MoeTileConfig& config);  // us; < 0 when the candidate failed
  double floor_us(int m);  // from the experts the device's routing actually touches at m

  Runtime& runtime_;
  MoeSpec spec_;
  TuneOptions options_;
  std::unique_ptr<Buffers> buffers_;
  double bandwidth_ = 0, gemm_rate_ = 0;
};

}  // namespace moejit
