// moejit tune: offline tuning of one MoE layer shape over batch sizes, written into a tuned DB.
#include <fmt/format.h>

#include <chrono>
#include <sstream>

#include "autotune/tuner.h"
#include "common/files.h"
#include "jit/moe_names.h"
#include "runtime/model_config.h"
#include "tools/cli_util.h"

namespace moejit::cli {

namespace {
constexpr const char* kHelp = R"(usage: moejit tune --model config.json [--tp N] [--ep N] [--dtype bf16|fp16] [--quant FORMAT]
                   [--batches 1,2,4,...] [--budget-s S] [--reps N] [--out db.json]
       moejit tune --spec spec.json [same options]

Times the MoE layer's tile configs on this machine's GPU for each batch size and writes the
fastest into a tuned DB, merged with what the file already holds (atomic; concurrent tunes lose
nothing). MoeLayer reads the DB in prepare().

  --model FILE     a Hugging Face config.json (Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3/V4, gpt-oss,
                   Llama-4): experts, top_k, sizes, routing and activation come from it
  --spec FILE      a MoeSpec as JSON: {"num_experts": 64, "top_k": 6, "hidden": 2048,
                   "intermediate": 1408, "activation": "silu_mul", ...}
  --tp N           tensor parallelism: each rank holds intermediate / N of every expert
  --ep N           expert parallelism: each rank holds num_experts / N experts
  --dtype T        bf16 or fp16 (default: the model config's torch_dtype, else bf16; a --spec file's own dtype)
  --quant FORMAT   expert weights: none (default), int8_channel, int4_group (groups of 128), mxfp4, mxfp4_packed,
                   fp8_block, fp8_channel, fp8_tensor (tuned DB entries are keyed by format)
  --batches LIST   batch sizes (default 1,2,4,...,8192: every power of two)
  --budget-s S     stop timing new candidates after S seconds (the best so far is kept)
  --reps N         timed runs per candidate and routing distribution (median; default 10)
  --out FILE       the DB to merge into (default: MOEJIT_TUNED_DB, else <cache>/tuned/<device>.json)
  --cache-dir DIR  kernel cache directory
)";

std::vector<int> parse_batches(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(static_cast<int>(parse_int(item, "--batches")));
  if (out.empty()) throw UsageError("--batches needs at least one size");
  return out;
}

int positive(const Args& args, const char* name, int fallback) {
  if (!args.has(name)) return fallback;
  const auto v = parse_int(args.get(name), std::string("--") + name);
  if (v < 1) throw UsageError(fmt::format("--{} must be at least 1", name));
  return static_cast<int>(v);
}
}  // namespace

int cmd_tune(const std::vector<std::string>& argv) {
  Args args = parse_args(argv, {"model", "spec", "tp", "ep", "dtype", "quant", "batches", "budget-s", "reps", "out", "cache-dir"},
                         {"help"});
  if (args.has("help")) {
    fmt::print("{}", kHelp);
    return kExitOk;
  }
  if (args.has("spec") == args.has("model")) throw UsageError("give exactly one of --model or --spec");
  if (!args.positional.empty()) throw UsageError("unexpected argument '" + args.positional[0] + "'");
  const MoeDType dtype = static_cast<MoeDType>(parse_dtype(args.get("dtype", "bf16")));
  MoeSpec spec;
  std::string name;
  if (args.has("model")) {
    const ModelMoeConfig model = ModelMoeConfig::from_file(args.get("model"));
    spec = args.has("dtype") ? model.moe_spec(dtype) : model.moe_spec();
    name = model.model_type;
  } else {
    spec = MoeSpec::from_json(nlohmann::json::parse(read_file(args.get("spec"))));
    if (args.has("dtype")) spec.dtype = dtype;
    name = args.get("spec");
  }
  const int tp = positive(args, "tp", 1), ep = positive(args, "ep", 1);
  if (spec.intermediate % tp != 0) throw UsageError(fmt::format("--tp {} does not divide intermediate {}", tp, spec.intermediate));
  if (spec.num_experts % ep != 0) throw UsageError(fmt::format("--ep {} does not divide {} experts", ep, spec.num_experts));
  spec.intermediate /= tp;
  if (ep > 1) spec.num_local_experts = spec.num_experts / ep;
  if (args.has("quant")) spec.quant = static_cast<MoeQuant>(parse_quant(args.get("quant")));
  spec.validate();

  TuneOptions options;
  if (args.has("batches")) options.batches = parse_batches(args.get("batches"));
  if (args.has("budget-s")) options.budget_s = static_cast<double>(positive(args, "budget-s", 0));
  options.reps = positive(args, "reps", 10);
  options.progress = [](int done, int total, double elapsed, const std::string& what) {
    const int width = 30, filled = std::min(width, done * width / std::max(total, 1));
    const double eta = done > 0 ? elapsed / done * std::max(total - done, 0) : 0;
    fmt::print(stderr, "\r[{}{}] {:>4}/{:<4} {:>6.1f}s  ETA {:>5.1f}s  {:<70.70}", std::string(filled, '#'),
               std::string(width - filled, '.'), done, total, elapsed, eta, what);
  };

  Runtime rt(options_from(args));
  std::string why;
  if (!rt.gpu_available(&why)) {
    fmt::print(stderr, "moejit tune: needs a GPU ({})\n", why);
    return kExitFailure;
  }
  fmt::print("tuning {} on {}: {} (tp {}, ep {})\n", name, rt.device().info().name, spec.describe(), tp, ep);
  const auto start = std::chrono::steady_clock::now();
  MoeTuner tuner(rt, spec, options);
  const auto results = tuner.run();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print(stderr, "\n");
  fmt::print("\n{:>6}  {:<62} {:>10} {:>12} {:>10} {:>7} {:>6}\n", "M", "config", "us", "heuristic us", "floor us",
             "eff", "timed");
  for (const auto& r : results)
    fmt::print("{:>6}  {:<62} {:>10.2f} {:>12} {:>10.2f} {:>6.1f}% {:>6}\n", r.m, r.config.describe(), r.us,
               r.heuristic_us > 0 ? fmt::format("{:.2f}", r.heuristic_us) : "-", r.floor_us,
               100.0 * r.floor_us / r.us, r.timed);
  const std::filesystem::path out = args.has("out") ? std::filesystem::path(args.get("out")) : rt.user_db_path();
  if (out.empty()) throw Error(Phase::Tune, "no DB path: give --out (the disk cache is off and MOEJIT_TUNED_DB unset)");
  tuner.to_db(results).merge_into(out);
  fmt::print("\ntuned {} batch sizes in {:.1f} s (compilation included); copy {:.0f} GB/s, {} GEMM {}; wrote {}\n",
             results.size(), seconds, tuner.bandwidth() / 1e9, quant_is_fp8(spec.quant) ? "fp8" : "bf16",
             tuner.gemm_rate() > 0 ? fmt::format("{:.0f} TFLOP/s", tuner.gemm_rate() / 1e12) : "n/a", out.string());
  return kExitOk;
}

}  // namespace moejit::cli
