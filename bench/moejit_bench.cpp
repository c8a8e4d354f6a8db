// moejit_bench: times moejit on the GPU against floors measured in the same run: the whole routing
// (top-k + metadata) and the whole MoE layer (routing + fused experts), bf16, for the model
// shapes or a Hugging Face config.json.
//
//   moejit_bench [--model config.json] [--tokens 1,16,128,1024,8192] [--json out.json] [--reps N]
//                [--only routing|moe] [--quant FORMAT] [--shapes name,name] [--swap-ab WNxWKxS|wgWNxS]
//                [--block-m N] [--walk-rows N] [--pingpong] [--multicast] [--pregather] [--gemm2-split N] [--balanced]
//
// Floors: bytes / device-to-device copy bandwidth, and flops / dense bf16 GEMM rate (cuBLAS, when
// present; for fp8 w8a8 layers the dense fp8 rate of cuBLASLt); efficiency = floor / time. Times are medians over replays of a CUDA graph holding several
// back-to-back forwards, divided by their count.
#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "bench/bench_sections.h"
#include "autotune/device_rates.h"
#include "autotune/timing.h"
#include "common/files.h"
#include "common/options.h"
#include "runtime/model_config.h"
#include "jit/moe_names.h"

using namespace moejit;
using namespace moejit::bench;

namespace {
// "4x2x4": swap-AB tiles of 4 warps along the columns, 2 along k, 4 k blocks in flight; "wg8x2": the
// wgmma variant, 8 warps (two warpgroups) along the columns, 2 k blocks in flight.
GemmTile parse_swap_ab(const std::string& text) {
  const bool wgmma = text.rfind("wg", 0) == 0;
  int wn = 0, wk = 1, stages = 0;
  char x1 = 0, x2 = 'x';
  std::istringstream in(wgmma ? text.substr(2) : text);
  if (wgmma)
    in >> wn >> x1 >> stages;
  else
    in >> wn >> x1 >> wk >> x2 >> stages;
  MOEJIT_REQUIRE(in && x1 == 'x' && x2 == 'x' && in.peek() == EOF,
                 "--swap-ab takes WNxWKxS (e.g. 4x2x4) or wgWNxS (e.g. wg8x2), not {}", text);
  return wgmma ? swap_ab_wgmma_tile(wn, stages) : swap_ab_tile(wn, wk, stages);
}

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(static_cast<int>(parse_int(item, "--tokens")));
  return out;
}

MoeSpec shape(int e, int k, int hidden, int n, MoeActivation act = kActSiluMul) {
  MoeSpec s;
  s.num_experts = e;
  s.top_k = k;
  s.hidden = hidden;
  s.intermediate = n;
  s.activation = act;
  return s;
}

std::vector<BenchShape> default_shapes() {
  MoeSpec gpt_oss = shape(128, 4, 2880, 2880, kActSwigluOai);
  gpt_oss.scoring = Scoring::SoftmaxAfterTopk;
  gpt_oss.has_bias = true;
  MoeSpec dsv2 = shape(64, 6, 2048, 1408);
  dsv2.renormalize = false;
  MoeSpec dsv3 = shape(256, 8, 7168, 256);  // TP8 slice of N = 2048
  dsv3.scoring = Scoring::Sigmoid;
  dsv3.n_group = 8;
  dsv3.topk_group = 4;
  dsv3.routed_scaling_factor = 2.5f;
  return {{"Mixtral-8x7B", shape(8, 2, 4096, 14336)},
          {"Qwen3-30B-A3B", shape(128, 8, 2048, 768)},
          {"gpt-oss-120b", gpt_oss},
          {"DeepSeek-V2-Lite", dsv2},
          {"DeepSeek-V3-TP8", dsv3}};
}
}  // namespace

int main(int argc, char** argv) {
  std::vector<BenchShape> shapes = default_shapes();
  Context ctx;
  ctx.token_counts = {1, 16, 128, 1024, 8192};
  std::string json_path, only, quant, shape_filter;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw Error(Phase::Validate, arg + " needs a value");
        return argv[++i];
      };
      if (arg == "--json") json_path = value();
      else if (arg == "--tokens") ctx.token_counts = parse_list(value());
      else if (arg == "--reps") ctx.reps = static_cast<int>(parse_int(value(), "--reps"));
      else if (arg == "--only") only = value();
      else if (arg == "--quant") quant = value();
      else if (arg == "--shapes") shape_filter = value();
      else if (arg == "--swap-ab") ctx.swap_ab = parse_swap_ab(value());
      else if (arg == "--gemv") {
        const std::string v = value();
        MOEJIT_REQUIRE(v == "on" || v == "off", "--gemv takes on or off, not {}", v);
        ctx.gemv = v == "on";
      } else if (arg == "--block-m") ctx.block_m = static_cast<int>(parse_int(value(), "--block-m"));
      else if (arg == "--walk-rows") ctx.walk_rows = static_cast<int>(parse_int(value(), "--walk-rows"));
      else if (arg == "--pingpong") ctx.pingpong = true;
      else if (arg == "--multicast") ctx.multicast = true;
      else if (arg == "--pregather") ctx.pregather = true;
      else if (arg == "--gemm2-split") ctx.gemm2_split = static_cast<int>(parse_int(value(), "--gemm2-split"));
      else if (arg == "--balanced") ctx.balanced = true;
      else if (arg == "--model") {
        auto m = ModelMoeConfig::from_file(value());
        shapes = {{m.model_type, m.moe_spec()}};
      } else if (arg == "--help") {
        fmt::print("usage: moejit_bench [--model config.json] [--tokens 1,16,...] [--reps N] [--json out.json] "
                   "[--only routing|moe] [--quant none|int8_channel|int4_group|mxfp4|mxfp4_packed|fp8_block|fp8_channel|fp8_tensor] "
                   "[--shapes name,name] [--swap-ab WNxWKxS|wgWNxS] [--gemv on|off] [--block-m N] [--walk-rows N] [--pingpong] [--multicast] "
                   "[--pregather] [--gemm2-split N] [--balanced]\n");
        return 0;
      } else {
        throw Error(Phase::Validate, "unknown argument " + arg);
      }
    }
    MOEJIT_REQUIRE(only.empty() || only == "routing" || only == "moe", "--only takes routing or moe, not {}", only);
    MOEJIT_REQUIRE(!ctx.token_counts.empty(), "--tokens needs at least one count");
    MOEJIT_REQUIRE(!ctx.gemv || !ctx.swap_ab, "--gemv and --swap-ab both choose the decode tiles: give one");
    MOEJIT_REQUIRE(!ctx.block_m || ctx.swap_ab, "--block-m sets the tokens of the --swap-ab tiles: give --swap-ab too");
    if (!shape_filter.empty()) {
      std::vector<BenchShape> kept;
      for (const auto& sh : shapes)
        if (("," + shape_filter + ",").find("," + sh.name + ",") != std::string::npos) kept.push_back(sh);
      MOEJIT_REQUIRE(!kept.empty(), "--shapes {} matches none of the shapes", shape_filter);
      shapes = kept;
    }
    if (!quant.empty()) {  // every shape with these weights (int4: groups of 128, symmetric)
      for (auto& sh : shapes) {
        sh.spec.quant = static_cast<MoeQuant>(parse_quant(quant));
        sh.spec.validate();
      }
    }
    Runtime rt(Options::from_env());
    std::string why;
    if (!rt.gpu_available(&why)) {
      fmt::print("moejit_bench: needs a GPU ({})\n", why);
      return 2;
    }
    auto& api = rt.driver();
    const DeviceInfo& info = rt.device().info();
    MOEJIT_CHECK_CU(api, Launch, cuStreamCreate(&ctx.stream, CU_STREAM_NON_BLOCKING));
    DeviceFiller filler(rt);
    ctx.filler = &filler;
    ctx.bandwidth = measure_copy_bandwidth(api);
    std::string gemm_why;
    ctx.gemm_rate = measure_gemm_rate(api, filler, &gemm_why);
    std::string fp8_why;
    const bool any_fp8 = std::any_of(shapes.begin(), shapes.end(), [](const BenchShape& sh) { return quant_is_fp8(sh.spec.quant); });
    if (any_fp8) ctx.fp8_gemm_rate = measure_fp8_gemm_rate(api, &fp8_why);
    auto rate_text = [](double rate, const std::string& why) {
      return rate > 0 ? fmt::format("{:.0f} TFLOP/s", rate / 1e12) : "n/a (" + why + ")";
    };
    fmt::print("device: {} ({} SMs, {})  copy bandwidth (read+write): {:.0f} GB/s  dense bf16 GEMM (cuBLAS 8192^3): {}{}\n\n",
               info.name, info.sm_count, info.arch(), ctx.bandwidth / 1e9, rate_text(ctx.gemm_rate, gemm_why),
               any_fp8 ? "  dense fp8 GEMM (cuBLASLt 8192^3, fast accumulation): " + rate_text(ctx.fp8_gemm_rate, fp8_why)
                       : std::string());
    nlohmann::json results = nlohmann::json::array();
    if (only.empty() || only == "routing") bench_routing(rt, ctx, shapes, results);
    if (only.empty() || only == "moe") bench_moe(rt, ctx, shapes, results);
    if (!json_path.empty()) {
      nlohmann::json doc = {{"device", info.name},         {"sm_count", info.sm_count},
                            {"arch", info.arch()},         {"copy_bandwidth_GBps", ctx.bandwidth / 1e9},
                            {"gemm_TFLOPs", ctx.gemm_rate / 1e12}, {"fp8_gemm_TFLOPs", ctx.fp8_gemm_rate / 1e12},
                            {"results", results}};
      write_file_synced(json_path, doc.dump(2));
      fmt::print("\nwrote {}\n", json_path);
    }
    api.cuStreamDestroy(ctx.stream);
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 2;
  }
}
