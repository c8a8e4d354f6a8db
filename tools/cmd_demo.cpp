// moejit demo: the README's main job. Compiles a top_k=6 MoE kernel set (DeepSeek-V2-Lite's routing:
// E=64, top_k=6) for several archs and shows what it made; with a GPU it also runs the kernels on
// random routing and verifies them against the CPU reference.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "runtime/device_buffer.h"
#include "runtime/model_config.h"
#include "runtime/router.h"
#include "tools/cli_util.h"

namespace moejit::cli {

namespace {
constexpr const char* kHelp = R"(usage: moejit demo [--model config.json] [--arch ARCH]... [--cache-dir DIR]

Compiles the kernel set of one MoE layer (default: E=64, top_k=6, as DeepSeek-V2-Lite) for sm_80,
sm_90a and sm_100a (or the given --arch list) and prints what was made. Where a GPU is present it
also compiles for that GPU, runs the kernels on random routing for several token counts and checks
every output against the CPU reference (exit 2 on any mismatch).
)";


bool run_on_gpu(Runtime& rt, const ModelMoeConfig& model) {
  auto& dev = rt.device();
  fmt::print("\nGPU: {} (sm_{}{}, {} SMs) -> compiling for {}\n", dev.info().name, dev.info().cc_major,
             dev.info().cc_minor, dev.info().sm_count, dev.info().arch());
  RouterConfig config = model.router_config(64);
  config.logit_type = LogitType::F32;
  Router router(rt, config);
  router.prepare();
  auto& api = rt.driver();
  std::mt19937 rng(2026);
  bool ok = true;
  const int E = config.num_experts, K = config.top_k;
  for (int tokens : {1, 7, 333, 4096}) {
    auto logits = grid_router_logits(tokens, E, rng());
    DeviceBuffer d_logits = DeviceBuffer::from(api, std::vector<float>(logits.begin(), logits.end()));
    DeviceBuffer workspace(api, router.workspace_bytes(tokens));
    workspace.fill_u32(0x7fc00001u);  // NaN poison: every output the check reads must be written
    auto out = router.carve(workspace.ptr(), tokens);
    router.route(nullptr, d_logits.ptr(), E, 0, 0, tokens, tokens, out);
    auto got = router.sorter().download(out.sort, tokens);
    std::vector<int> ids(std::size_t(tokens) * K);
    std::vector<float> weights(ids.size());
    MOEJIT_CHECK_CU(api, Launch, cuMemcpyDtoH(ids.data(), reinterpret_cast<CUdeviceptr>(out.topk_ids), ids.size() * 4));
    MOEJIT_CHECK_CU(api, Launch, cuMemcpyDtoH(weights.data(), reinterpret_cast<CUdeviceptr>(out.topk_weights), ids.size() * 4));
    auto want_topk = reference_routing_topk(logits, tokens, config, {});
    std::string diff;
    for (std::size_t i = 0; i < ids.size() && diff.empty(); ++i) {
      if (ids[i] != want_topk.ids[i]) diff = fmt::format("topk id [{}] = {}, expected {}", i, ids[i], want_topk.ids[i]);
      else if (!(std::abs(weights[i] - want_topk.weights[i]) <= 1e-5))
        diff = fmt::format("topk weight [{}] = {}, expected {}", i, weights[i], want_topk.weights[i]);
    }
    if (diff.empty())
      diff = describe_routing_difference(reference_routing_sort(want_topk.ids, tokens, K, E, E, {}, 64), got);
    fmt::print("  routing M={:<5} top-{} rows={:<6} padded={:<6} tiles={:<4} {}\n", tokens, K, got.routed_rows,
               got.padded_rows, got.tiles, diff.empty() ? "PASS (matches the fp64 CPU reference)" : "FAIL: " + diff);
    ok = ok && diff.empty();
  }
  return ok;
}
}  // namespace

int cmd_demo(const std::vector<std::string>& argv) {
  Args args = parse_args(argv, {"model", "arch", "cache-dir"}, {"help"});
  if (args.has("help")) {
    fmt::print("{}", kHelp);
    return kExitOk;
  }
  ModelMoeConfig model;
  if (args.has("model")) {
    model = ModelMoeConfig::from_file(args.get("model"));
  } else {
    model = ModelMoeConfig::from_json({{"model_type", "deepseek_v2 (Lite)"}, {"n_routed_experts", 64},
                                       {"num_experts_per_tok", 6}, {"hidden_size", 2048},
                                       {"moe_intermediate_size", 1408}});
  }
  std::vector<std::string> archs = args.all("arch");
  if (archs.empty()) archs = {"sm_80", "sm_90a", "sm_100a"};

  Runtime rt(options_from(args));
  fmt::print("model {}\n\n", model.describe());
  std::vector<KernelSpec> specs;
  for (const auto& arch : archs)
    for (auto& s : kernel_specs_for(model, arch)) specs.push_back(s);
  auto compiled = rt.compile_all(specs);
  fmt::print("{:<9} {:<8} {:<44} {:>8} {:>9}  {}\n", "status", "arch", "kernel set", "cubin B", "compile s",
             "entries (registers)");
  for (const auto& k : compiled) {
    std::string entries;
    for (const auto& e : k->entries) entries += fmt::format("{}({}) ", e.name, e.resources.registers);
    fmt::print("{:<9} {:<8} {:<44} {:>8} {:>9.3f}  {}\n", k->cache_hit ? "cached" : "compiled", k->spec.arch,
               k->spec.to_string().substr(0, 44), k->entry->cubin.size(), k->compile_seconds, entries);
  }
  for (const auto& k : compiled) {
    if (k->spec.family != "routing_sort") continue;
    fmt::print("\ntop_k={} x tokens_per_cta={} = {} keys per CTA -> bitonic width PADDED={} (power of two)\n",
               model.top_k, k->spec.get_int("tokens_per_cta"), model.top_k * k->spec.get_int("tokens_per_cta"),
               k->spec.get_int("padded"));
    break;
  }
  fmt::print("cache: {}\n", rt.cache().on_disk() ? rt.cache().root().string() : "in memory only");

  std::string why;
  if (!rt.gpu_available(&why)) {
    fmt::print("\nno GPU here ({})\nCompiled ahead only; run this on a GPU machine to execute and verify.\n", why);
    return kExitOk;
  }
  bool ok = run_on_gpu(rt, model);
  fmt::print("{}\n", ok ? "demo: all GPU checks passed" : "demo: GPU CHECK FAILED");
  return ok ? kExitOk : kExitFailure;
}

}  // namespace moejit::cli
