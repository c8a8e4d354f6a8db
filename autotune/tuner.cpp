#include "autotune/tuner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <random>

#include "autotune/config_space.h"
#include "autotune/device_rates.h"
#include "autotune/timing.h"
#include "common/error.h"
#include "common/half_float.h"
#include "common/log.h"
#include "runtime/device_buffer.h"
#include "runtime/device_fill.h"
#include "runtime/moe_quant.h"
#include "runtime/event_timer.h"
#include "runtime/moe_layer.h"
#include "runtime/runtime.h"
#include "templates/moe/moe_decode_args.cuh"

namespace moejit {

namespace {
constexpr int kLogitSets = 4;  // 0, 1: random; 2, 3: skewed
constexpr int kGraphMaxTokens = 16;
constexpr int kMaxWeightCopies = 8;

// Router logits [m, E] in the spec's logit type: uniform random, or skewed towards a few experts.
std::vector<std::uint16_t> logits_bits(const MoeSpec& s, int m, bool skewed, std::uint64_t seed, std::vector<float>* f32) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  const int E = s.num_experts;
  std::vector<float> v(std::size_t(m) * E);
  for (int t = 0; t < m; ++t)
    for (int e = 0; e < E; ++e)
      v[std::size_t(t) * E + e] = u(rng) + (skewed ? 3.f * std::exp(-8.f * float(e) / float(E)) : 0.f);
  std::vector<std::uint16_t> bits;
  if (s.logit_dtype == LogitType::F32) {
    *f32 = std::move(v);
  } else {
    const int code = s.logit_dtype == LogitType::BF16 ? 0 : 1;
    bits.resize(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) bits[i] = float_to_half_bits(v[i], code);
  }
  return bits;
}
}  // namespace

struct MoeTuner::Buffers {
  std::unique_ptr<MoeLayer> layer;
  std::vector<DeviceExpertWeights> weights;  // copies, rotated so that weights come from memory, not L2
  DeviceBuffer b1, b2, hidden, out, workspace, expert_map, correction_bias;
  std::vector<DeviceBuffer> logits;
  int max_m = 0;
  CUstream stream = nullptr;
  int turn = 0;

  MoeForwardArgs args(const MoeSpec& s, int m, int set) {
    const int copy = turn++ % static_cast<int>(weights.size());
    MoeDevicePointers p;
    p.hidden = hidden.ptr();
    p.router_logits = logits[set].ptr();
    if (s.n_group > 1) p.correction_bias = correction_bias.ptr();
    p.expert_map = expert_map.ptr();
    weights[copy].point(p);
    p.b1 = b1.ptr();
    p.b2 = b2.ptr();
    p.out = out.ptr();
    p.workspace = workspace.ptr();
    p.workspace_size = workspace.bytes();
    return contiguous_moe_args(s, m, p);
  }
};

MoeTuner::MoeTuner(Runtime& runtime, MoeSpec spec, TuneOptions options)
    : runtime_(runtime), spec_(spec), options_(std::move(options)) {
  spec_.validate();
  MOEJIT_REQUIRE(!options_.batches.empty(), "tune: no batch sizes");
  for (int m : options_.batches) MOEJIT_REQUIRE(m >= 1, "tune: batch size {} must be positive", m);
  MOEJIT_REQUIRE(options_.reps >= 10, "tune: reps = {} must be at least 10 (median of >= 10 runs)", options_.reps);
  std::sort(options_.batches.begin(), options_.batches.end());
  options_.batches.erase(std::unique(options_.batches.begin(), options_.batches.end()), options_.batches.end());
}

MoeTuner::~MoeTuner() {
  if (buffers_ && buffers_->stream) runtime_.driver().cuStreamDestroy(buffers_->stream);
}

double MoeTuner::floor_us(int m) {
  Buffers& b = *buffers_;
  const std::size_t EL = spec_.local_experts();
  const MoeTileConfig config = heuristic_tile_config(spec_, m);
  double touched = 0;
  for (int set = 0; set < kLogitSets; ++set) {
    const MoeForwardArgs args = b.args(spec_, m, set);
    b.layer->forward_with_config(b.stream, args, config);
    touched += b.layer->experts_touched(args);
  }
  touched /= kLogitSets;
  const double R = spec_.w1_rows(), K = spec_.hidden, N = spec_.intermediate;
  const double bytes = touched * double(quant_expert_weight_bytes(spec_)) + 2.0 * m * K * 2;
  const double flops = 2.0 * m * spec_.top_k * (R * K + K * N) * (double(EL) / spec_.num_experts);
  return std::max(bytes / bandwidth_, gemm_rate_ > 0 ? flops / gemm_rate_ : 0.0) * 1e6;
}

double MoeTuner::time_config(int m, const MoeTileConfig& config) {
  Buffers& b = *buffers_;
  auto& api = runtime_.driver();
  try {
    // A fast wrong answer is no result: the whole output must be written and finite.
    b.out.fill_u32(0x7fc07fc0u);
    b.layer->forward_with_config(b.stream, b.args(spec_, m, 0), config);
    MOEJIT_CHECK_CU(api, Launch, cuStreamSynchronize(b.stream));
    const auto bits = b.out.to_vector<std::uint16_t>(std::size_t(m) * spec_.hidden);
    for (auto v : bits)
      if (!std::isfinite(half_bits_to_float(v, spec_.dtype)))
        throw Error(Phase::Tune, "output not completely written or not finite");
    double total = 0;
    for (int dist = 0; dist < 2; ++dist) {
      if (m <= kGraphMaxTokens) {
        const int inner = 2 * static_cast<int>(b.weights.size());
        total += time_graph_us(api, b.stream, inner, options_.reps, [&](int i) {
          b.layer->forward_with_config(b.stream, b.args(spec_, m, 2 * dist + i % 2), config);
        });
      } else {
        EventTimer timer(api);
        std::vector<double> samples;
        for (int r = 0; r < options_.reps + 1; ++r) {
          const double ms = timer.time_ms(b.stream, [&] {
            b.layer->forward_with_config(b.stream, b.args(spec_, m, 2 * dist + r % 2), config);
          });
          if (r >= 1) samples.push_back(ms * 1e3);
        }
        total += median(samples);
      }
    }
    return total / 2;
  } catch (const Error& e) {
    log(LogLevel::Warn, "tune: M={} config {} skipped: {}", m, config.describe(), e.message());
    return -1;
  }
}

std::vector<TuneResult> MoeTuner::run() {
  auto& api = runtime_.driver();
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  const DeviceInfo& info = runtime_.device().info();
  const std::string arch = runtime_.device_arch();
  const DeviceLimits limits{info.max_shared_per_block_optin, arch};

  // Buffers for the largest batch; random contents, never zeros.
  buffers_ = std::make_unique<Buffers>();
  Buffers& b = *buffers_;
  MOEJIT_CHECK_CU(api, Launch, cuStreamCreate(&b.stream, CU_STREAM_NON_BLOCKING));
  b.max_m = options_.batches.back();
  b.layer = std::make_unique<MoeLayer>(runtime_, spec_);
  DeviceFiller filler(runtime_);
  const std::size_t K = spec_.hidden, R = spec_.w1_rows(), E = spec_.num_experts;
  const std::size_t EL = spec_.local_experts(), M = b.max_m;
  const std::size_t weight_bytes = EL * quant_expert_weight_bytes(spec_);
  const ScalarType dt = scalar_type_of(spec_.dtype);
  const int copies = static_cast<int>(
      std::clamp<std::size_t>((2 * std::size_t(info.l2_bytes) + weight_bytes - 1) / weight_bytes, 1, kMaxWeightCopies));
  for (int c = 0; c < copies; ++c) b.weights.push_back(random_device_weights(api, filler, b.stream, spec_, 10 + 2 * c));
  b.hidden = DeviceBuffer(api, M * K * 2);
  filler.fill(b.stream, b.hidden.ptr(), M * K, dt, 1, 1.f);
  if (spec_.has_bias) {
    b.b1 = DeviceBuffer(api, EL * R * 4);
    b.b2 = DeviceBuffer(api, EL * K * 4);
    filler.fill(b.stream, b.b1.ptr(), EL * R, ScalarType::F32, 2, 0.5f);
    filler.fill(b.stream, b.b2.ptr(), EL * K, ScalarType::F32, 3, 0.5f);
  }
  b.correction_bias = DeviceBuffer(api, E * 4);
  filler.fill(b.stream, b.correction_bias.ptr(), E, ScalarType::F32, 4, 0.1f);
  if (EL < E) {
    std::vector<int> map(E, -1);
    for (std::size_t i = 0; i < EL; ++i) map[(i * E) / EL] = static_cast<int>(i);  // spread over the range
    b.expert_map = DeviceBuffer::from(api, map);
  }
  for (int set = 0; set < kLogitSets; ++set) {
    std::vector<float> f32;
    auto bits = logits_bits(spec_, b.max_m, set >= 2, 1000 + set, &f32);
    b.logits.push_back(f32.empty() ? DeviceBuffer::from(api, bits) : DeviceBuffer::from(api, f32));
  }
  b.out = DeviceBuffer(api, M * K * 2);
  b.workspace = DeviceBuffer(api, b.layer->workspace_bytes(b.max_m));
  MOEJIT_CHECK_CU(api, Launch, cuStreamSynchronize(b.stream));
  bandwidth_ = measure_copy_bandwidth(api);
  std::string why;
  // w8a8 layers run on the fp8 tensor cores: their math floor is the fp8 rate.
  gemm_rate_ = quant_is_fp8(spec_.quant) ? measure_fp8_gemm_rate(api, &why) : measure_gemm_rate(api, filler, &why);
  if (gemm_rate_ == 0) log(LogLevel::Info, "tune: floors use bandwidth only ({})", why);

  // A rough count of the candidates for the progress estimate.
  int total = 0;
  for (int m : options_.batches) {
    const int bm = heuristic_tile_config(spec_, m, true, arch).block_m;
    total += static_cast<int>(candidate_block_ms(spec_, m, arch).size() + candidate_tiles(spec_, bm, true, limits).size() +
                              candidate_tiles(spec_, bm, false, limits).size());
  }
  const bool sum_choice = spec_.fused && spec_.reduce == ReduceMode::Fast;
  if (sum_choice) total += static_cast<int>(options_.batches.size());
  const std::vector<int> walk_rows = candidate_walk_rows(info.sm_count);
  const bool walk_choice = wgmma_supported(spec_, arch);
  int done = 0;
  std::vector<TuneResult> results;
  for (int m : options_.batches) {
    TuneResult r;
    r.m = m;
    r.heuristic = heuristic_tile_config(spec_, m, true, arch);
    r.floor_us = floor_us(m);
    // The grouped-GEMM search starts from the heuristic's tiles (the decode GEMV is timed last).
    const MoeTileConfig grouped = r.heuristic.gemv ? heuristic_tile_config(spec_, m, true, arch, false) : r.heuristic;
    MoeTileConfig best = grouped;
    double best_us = -1;
    // Times a list of candidates (compiling ahead in the background), keeps the fastest.
    auto try_all = [&](const std::vector<MoeTileConfig>& candidates, const char* stage) {
      std::vector<std::future<void>> compiles;
      for (const auto& c : candidates)
        compiles.push_back(std::async(std::launch::async, [&, c] {
          runtime_.compile_all(moe_expert_kernel_specs(spec_, c, arch, moe_gemm2_stores_rows16(spec_, c, m)));
        }));
      for (std::size_t i = 0; i < candidates.size(); ++i) {
        const bool over = options_.budget_s > 0 && elapsed() > options_.budget_s && best_us > 0;
        double us = -1;
        if (!over) {
          try {
            compiles[i].get();
            us = time_config(m, candidates[i]);
          } catch (const Error& e) {
            log(LogLevel::Warn, "tune: M={} config {} does not compile: {}", m, candidates[i].describe(), e.message());
          }
        } else {
          compiles[i].wait();
        }
        if (us < 0) {
          ++r.skipped;
        } else {
          ++r.timed;
          if (candidates[i] == r.heuristic) r.heuristic_us = us;
          if (best_us < 0 || us < best_us) {
            best_us = us;
            best = candidates[i];
          }
        }
        ++done;
        if (options_.progress)
          options_.progress(done, std::max(total, done), elapsed(), fmt::format("M={} {} {}", m, stage, candidates[i].describe()));
      }
    };
    std::vector<MoeTileConfig> by_block_m = {grouped};
    for (int bm : candidate_block_ms(spec_, m, arch)) {
      const MoeTileConfig c = heuristic_config_for_block_m(spec_, bm, arch);
      if (std::find(by_block_m.begin(), by_block_m.end(), c) == by_block_m.end() && config_fits(spec_, c, limits))
        by_block_m.push_back(c);
    }
    try_all(by_block_m, "block_m");
    for (bool gemm1 : {true, false}) {
      std::vector<MoeTileConfig> tiles;
      for (const auto& t : candidate_tiles(spec_, best.block_m, gemm1, limits)) {
        MoeTileConfig c = best;
        (gemm1 ? c.gemm1 : c.gemm2) = t;
        if (!(c == best)) tiles.push_back(c);
      }
      try_all(tiles, gemm1 ? "gemm1" : "gemm2");
    }
    // The top-k sum the other way than the batch-size rule (TopkSum::Auto) takes here: fp32 adds
    // against DTYPE rows, where the layer can do both (the better one depends on the tiles).
    if (sum_choice && best.gemm2.split_k <= 1 && best.topk_sum == TopkSum::Auto) {
      MoeTileConfig other = best;
      other.topk_sum = moe_gemm2_stores_rows16(spec_, best, m) ? TopkSum::Atomic : TopkSum::Rows;
      if (config_fits(spec_, other, limits)) try_all({other}, "topk_sum");  // (a staged tile may be rows-only)
    }
    const long long rows_per_expert = (static_cast<long long>(m) * spec_.top_k + spec_.local_experts() - 1) /
                                      spec_.local_experts();
    // A persistent GEMM1 reading X gathered beforehand (a copy kernel, then whole A tiles by bulk
    // tensor copies): a launch argument too. It wins where GEMM1's per-row gather bounds it and
    // loses where the copy weighs (H200: Mixtral-8x7B M = 8192 10.05 -> 9.49 ms, DeepSeek-V3 TP8
    // 2.32 -> 2.73 ms).
    if (best.gemm1.persistent && rows_per_expert >= best.block_m) {
      MoeTileConfig c = best;
      c.gemm1.pregather = true;
      try_all({c}, "gemm1 pregather");
    }
    // Gated GEMM1 weight tiles multicast over clusters of two CTAs, where experts have row tiles to
    // pair (a kernel of its own: compiles): from one row tile an expert on average, since uneven
    // counts then give many experts two (H100, fp8_block DeepSeek-V3 TP8 M = 4096, 128 rows an
    // expert: 1276 -> 1237-1242 us). H200, same-run A/B: Mixtral-8x7B M = 1024 1686-1689 ->
    // 1648-1654 us, gpt-oss-120b M = 4096 2905-2915 -> 2833-2842; slower at gpt-oss M = 8192.
    if (best.gemm1.persistent && !best.gemm1.pingpong && spec_.fused && activation_is_gated(spec_.activation) &&
        rows_per_expert >= best.block_m) {
      MoeTileConfig c = best;
      c.gemm1.multicast = true;
      if (config_fits(spec_, c, limits)) try_all({c}, "gemm1 multicast");
    }
    // The work queue against the fixed stride (GemmTile::work_queue), per GEMM, the other way than the
    // layer's rule: a launch argument, so these time without compiling. H100, same run, 16-bit
    // layers: gpt-oss-120b / DeepSeek-V3 TP8 M = 1024 / 2048 -1.2..-1.7% with the queue,
    // Mixtral-8x7B +13..+30%, DeepSeek-V3 TP8 M = 8192 +10% (both GEMMs; GEMM2 alone -8.5%, thirty-first
    // session: the rule for short GEMM2 k loops, work_queue_by_default).
    for (bool gemm1 : {true, false}) {
      if (!can_claim_work_items(gemm1 ? best.gemm1 : best.gemm2)) continue;
      MoeTileConfig c = best;
      (gemm1 ? c.gemm1 : c.gemm2).work_queue = work_queue_by_default(spec_, best.block_m, !gemm1) ? 0 : 1;
      try_all({c}, gemm1 ? "gemm1 work queue" : "gemm2 work queue");
    }
    // The wgmma kernels' grouped walk (rows per column sweep), per GEMM, where the batch gives the
    // experts whole row tiles: a launch argument, so these time without compiling.
    if (walk_choice && rows_per_expert >= best.block_m)
      for (bool gemm1 : {true, false}) {
        if (!(gemm1 ? best.gemm1 : best.gemm2).wgmma) continue;
        std::vector<MoeTileConfig> walks;
        for (int rows : walk_rows) {
          MoeTileConfig c = best;
          (gemm1 ? c.gemm1 : c.gemm2).walk_rows = rows;
          walks.push_back(c);
        }
        try_all(walks, gemm1 ? "gemm1 walk" : "gemm2 walk");
      }
    // The decode GEMV pair against the best grouped-GEMM config (few tokens: it has no tiles to tune).
    if (decode_gemv_supported(spec_, arch) && m <= decode_gemv_max_tokens(spec_)) try_all({decode_gemv_config()}, "gemv");
    if (best_us < 0) throw Error(Phase::Tune, fmt::format("tune: no config ran for M={} (see the warnings)", m));
    r.config = best;
    r.us = best_us;
    results.push_back(r);
  }
  return results;
}

TunedDb MoeTuner::to_db(const std::vector<TuneResult>& results) {
  TunedDb db(runtime_.db_metadata());
  const std::string key = tuned_shape_key(spec_);
  for (const auto& r : results) db.set(key, {r.m, r.config, r.us});
  return db;
}

}  // namespace moejit
