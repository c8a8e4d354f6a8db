// moejit demo: the README's main job. Compiles a top_k=6 MoE kernel set (DeepSeek-V2-Lite's routing:
// E=64, top_k=6) for several archs and shows what it made; with a GPU it also runs the kernels on
// random routing and verifies them against the CPU reference.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "runtime/device_buffer.h"
#include "runtime/model_config.h"
#include "runtime/routing_sort_launcher.h"
#include "tools/cli_util.h"

namespace moejit::cli {

namespace {
constexpr const char* kHelp = R"(usage: moejit demo [--model config.json] [--arch ARCH]... [--cache-dir DIR]

Compiles the kernel set of one MoE layer (default: E=64, top_k=6, as DeepSeek-V2-Lite) for sm_80,
sm_90a and sm_100a (or the given --arch list) and prints what was made. Where a GPU is present it
also compiles for that GPU, runs the kernels on random routing for several token counts and checks
every output against the CPU reference (exit 2 on any mismatch).
)";

std::vector<int> random_topk_ids(int tokens, int top_k, int experts, std::mt19937& rng) {
  std::vector<int> ids(std::size_t(tokens) * top_k);
  std::vector<int> perm(experts);
  std::iota(perm.begin(), perm.end(), 0);
  for (int t = 0; t < tokens; ++t) {
    for (int k = 0; k < top_k; ++k) {  // partial Fisher-Yates: top_k distinct experts
      std::uniform_int_distribution<int> pick(k, experts - 1);
      std::swap(perm[k], perm[pick(rng)]);
      ids[std::size_t(t) * top_k + k] = perm[k];
    }
  }
  return ids;
}

bool run_on_gpu(Runtime& rt, const ModelMoeConfig& model) {
  auto& dev = rt.device();
  fmt::print("\nGPU: {} (sm_{}{}, {} SMs) -> compiling for {}\n", dev.info().name, dev.info().cc_major,
             dev.info().cc_minor, dev.info().sm_count, dev.info().arch());
  RoutingSorter sorter(rt, {.num_experts = model.num_experts, .top_k = model.top_k, .block_m = 64});
  sorter.prepare();
  std::mt19937 rng(2026);
  bool ok = true;
  for (int tokens : {1, 7, 333, 4096}) {
    auto ids = random_topk_ids(tokens, model.top_k, model.num_experts, rng);
    DeviceBuffer d_ids = DeviceBuffer::from(rt.driver(), ids);
    DeviceBuffer workspace(rt.driver(), sorter.workspace_bytes(tokens));
    workspace.fill_u32(0xdeadbeefu);  // poison: every output the check reads must be written
    auto buffers = sorter.carve(workspace.ptr(), tokens);
    sorter.run(nullptr, d_ids.ptr(), 0, tokens, tokens, buffers);
    auto got = sorter.download(buffers, tokens);
    auto want = reference_routing_sort(ids, tokens, model.top_k, model.num_experts, model.num_experts, {}, 64);
    std::string diff = describe_routing_difference(want, got);
    fmt::print("  routing M={:<5} rows={:<6} padded={:<6} tiles={:<4} {}\n", tokens, got.routed_rows, got.padded_rows,
               got.tiles, diff.empty() ? "PASS (matches CPU reference)" : "FAIL: " + diff);
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
  fmt::print("\ntop_k={} x tokens_per_cta={} = {} keys per CTA -> bitonic width PADDED={} (power of two)\n",
             model.top_k, compiled.front()->spec.get_int("tokens_per_cta"),
             model.top_k * compiled.front()->spec.get_int("tokens_per_cta"), compiled.front()->spec.get_int("padded"));
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
