// MoeLayer's tile configs: the tuned DB's buckets for this layer (those the device can run), the
// heuristic elsewhere, and tuning on first use (MOEJIT_TUNE=1).
#include <limits>

#include "autotune/tuner.h"
#include "common/error.h"
#include "common/log.h"
#include "runtime/moe_layer.h"
#include "runtime/moe_layer_parts.h"
#include "runtime/runtime.h"

namespace moejit {

namespace {
constexpr double kOnlineTuneBudgetSeconds = 60;  // MOEJIT_TUNE=1: a layer's first-use tuning
}  // namespace

MoeTileConfig MoeLayer::tile_config(int num_tokens) const {
  std::lock_guard<std::mutex> lock(tuned_mutex_);
  // A decode GEMV bucket serves batches up to its token limit only; beyond, the nearest other bucket.
  const bool gemv_runs = num_tokens <= decode_gemv_max_tokens(spec_);
  const TunedEntry* nearest =
      nearest_bucket(tuned_, num_tokens, [gemv_runs](const MoeTileConfig& c) { return gemv_runs || !c.gemv; });
  return nearest ? nearest->config : heuristic_tile_config(spec_, num_tokens, true, runtime_.device_arch());
}

bool MoeLayer::tuned() const {
  std::lock_guard<std::mutex> lock(tuned_mutex_);
  return !tuned_.empty();
}

void MoeLayer::require_fits_device(const std::vector<KernelSpec>& specs, int block_m) const {
  const int smem_limit = runtime_.device().info().max_shared_per_block_optin;
  for (const auto& s : specs)
    MOEJIT_REQUIRE(moe_gemm_shared_bytes(s, block_m) <= smem_limit,
                   "{} needs {} bytes of shared memory per CTA, the device allows {}", s.family,
                   moe_gemm_shared_bytes(s, block_m), smem_limit);
}

void MoeLayer::load_tuned() {
  {
    std::lock_guard<std::mutex> lock(tuned_mutex_);
    if (tuned_loaded_) return;
  }
  std::vector<TunedEntry> usable;
  const std::string arch = runtime_.device_arch();
  for (const auto& e : runtime_.tuned_entries(tuned_shape_key(spec_))) {
    try {
      // GEMM2 in every role the config may run in (by batch size; a staged rows-only tile: DTYPE rows).
      for (bool rows16 : moe_gemm2_roles_upto(spec_, e.config, std::numeric_limits<int>::max()))
        require_fits_device(moe_expert_kernel_specs(spec_, e.config, arch, rows16), e.config.block_m);
      usable.push_back(e);
    } catch (const Error& err) {
      log(LogLevel::Warn, "moe: tuned config {} for M={} is not usable here ({}); using the heuristic there",
          e.config.describe(), e.m, err.message());
    }
  }
  std::lock_guard<std::mutex> lock(tuned_mutex_);
  tuned_ = std::move(usable);
  tuned_loaded_ = true;
}

void MoeLayer::tune_now(int max_tokens) {
  TuneOptions options;
  options.batches.clear();
  for (int m = 1; m < max_tokens; m *= 2) options.batches.push_back(m);
  options.batches.push_back(max_tokens);
  options.budget_s = kOnlineTuneBudgetSeconds;
  log(LogLevel::Info, "moe: MOEJIT_TUNE=1 and no tuned configs for {}: tuning {} batch sizes (budget {} s)",
      spec_.describe(), options.batches.size(), kOnlineTuneBudgetSeconds);
  MoeTuner tuner(runtime_, spec_, options);
  const auto results = tuner.run();
  const TunedDb db = tuner.to_db(results);
  const auto path = runtime_.user_db_path();
  if (!path.empty()) {
    db.merge_into(path);
    runtime_.reload_tuned_dbs();
  }
  std::lock_guard<std::mutex> lock(tuned_mutex_);
  tuned_ = db.buckets(tuned_shape_key(spec_));
}

}  // namespace moejit
