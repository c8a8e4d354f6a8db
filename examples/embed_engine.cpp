// Example: a minimal engine embedding moejit. Reads a Hugging Face config.json, builds the model's
// MoE layer, runs a stack of such layers (each with its own weights; layer l's output is layer
// l+1's input) eagerly once, checking every layer against the fp64 CPU reference, then captures the
// stack into one CUDA graph, replays it and prints tokens/s. Without a GPU it compiles the layer's
// kernels ahead (into the cache) and prints what it compiled.
//
//   build/examples/embed_engine [config.json] [--tokens M] [--layers L] [--iters I]
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "runtime/model_config.h"
#include "runtime/moe_check.h"
#include "runtime/runtime.h"

using namespace moejit;

namespace {

struct Settings {
  std::string config = "examples/configs/deepseek-v2-lite.json";
  int tokens = 256;
  int layers = 3;
  int iters = 20;
};

Settings parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) {
      if (i + 1 >= argc) throw Error(Phase::Validate, fmt::format("{} needs a value", name));
      return static_cast<int>(parse_int(argv[++i], name));
    };
    if (a == "--tokens") s.tokens = value("--tokens");
    else if (a == "--layers") s.layers = value("--layers");
    else if (a == "--iters") s.iters = value("--iters");
    else if (a == "--help" || a == "-h") {
      fmt::print("usage: embed_engine [config.json] [--tokens M] [--layers L] [--iters I]\n");
      std::exit(0);
    } else if (!a.empty() && a[0] == '-') throw Error(Phase::Validate, fmt::format("unknown option {}", a));
    else s.config = a;
  }
  MOEJIT_REQUIRE(s.tokens >= 1 && s.layers >= 1 && s.iters >= 1, "tokens, layers and iters must be positive");
  return s;
}

int compile_ahead(Runtime& rt, const MoeSpec& spec, const Settings& s, const std::string& why) {
  fmt::print("no GPU here ({}).\nCompiling the layer's kernels ahead for up to {} tokens:\n", why, s.tokens);
  for (const char* arch : {"sm_80", "sm_90a"}) {
    for (const auto& k : rt.compile_all(moe_layer_kernel_specs(spec, s.tokens, arch)))
      fmt::print("  {:<8} {:<9} {:<60} cubin {:>6} B\n", arch, k->cache_hit ? "cached" : "compiled",
                 k->spec.to_string().substr(0, 60), k->entry->cubin.size());
  }
  fmt::print("cache: {}\n", rt.cache().on_disk() ? rt.cache().root().string() : "in memory only");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Settings s = parse(argc, argv);
    const ModelMoeConfig model = ModelMoeConfig::from_file(s.config);
    const MoeSpec spec = model.moe_spec();
    fmt::print("model  {}\nlayer  {}\n", model.describe(), spec.describe());
    Runtime rt{Options::from_env()};
    std::string why;
    if (!rt.gpu_available(&why)) return compile_ahead(rt, spec, s, why);

    auto& api = rt.driver();
    fmt::print("GPU    {} ({})\n", rt.device().info().name, rt.device_arch());
    MoeLayer layer(rt, spec);  // one layer object serves every layer of the model: same spec
    layer.prepare(s.tokens);
    const int m = s.tokens;
    std::vector<std::unique_ptr<MoeProblem>> stack;  // weights, logits, output, workspace per layer
    for (int l = 0; l < s.layers; ++l)
      stack.push_back(std::make_unique<MoeProblem>(api, spec, m, layer.workspace_bytes(m), 100 + l));
    auto layer_args = [&](int l) {
      MoeForwardArgs a = stack[l]->args(m, /*modular=*/false);
      if (l > 0) a.hidden.data = stack[l - 1]->out.ptr();  // the previous layer's output
      return a;
    };

    // Eager run, one layer at a time, each checked against the reference on its actual input.
    bool ok = true;
    for (int l = 0; l < s.layers; ++l) {
      stack[l]->poison();
      layer.forward(nullptr, layer_args(l));
      if (l > 0) stack[l]->host().hidden = stack[l - 1]->output(m);
      stack[l]->fetch_routing(layer, m);
      const double err = stack[l]->relative_error(stack[l]->output(m), MoeProblem::sample_tokens(m, 32));
      const bool pass = std::isfinite(err) && err <= 1e-2;
      fmt::print("layer {:<2} eager: relative error {:.2e} vs fp64 reference: {}\n", l, err, pass ? "PASS" : "FAIL");
      ok = ok && pass;
    }

    // The whole stack as one CUDA graph on a stream of our own.
    CUstream stream = nullptr;
    MOEJIT_CHECK_CU(api, Launch, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    MOEJIT_CHECK_CU(api, Launch, cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    for (int l = 0; l < s.layers; ++l) layer.forward(stream, layer_args(l));
    MOEJIT_CHECK_CU(api, Launch, cuStreamEndCapture(stream, &graph));
    MOEJIT_CHECK_CU(api, Launch, cuGraphInstantiate(&exec, graph, 0));
    CUevent start = nullptr, stop = nullptr;
    MOEJIT_CHECK_CU(api, Launch, cuEventCreate(&start, CU_EVENT_DEFAULT));
    MOEJIT_CHECK_CU(api, Launch, cuEventCreate(&stop, CU_EVENT_DEFAULT));
    for (int i = 0; i < 3; ++i) MOEJIT_CHECK_CU(api, Launch, cuGraphLaunch(exec, stream));  // warm-up
    MOEJIT_CHECK_CU(api, Launch, cuEventRecord(start, stream));
    for (int i = 0; i < s.iters; ++i) MOEJIT_CHECK_CU(api, Launch, cuGraphLaunch(exec, stream));
    MOEJIT_CHECK_CU(api, Launch, cuEventRecord(stop, stream));
    MOEJIT_CHECK_CU(api, Launch, cuEventSynchronize(stop));
    float ms = 0;
    MOEJIT_CHECK_CU(api, Launch, cuEventElapsedTime(&ms, start, stop));
    const double per_stack_us = 1e3 * ms / s.iters;
    // The replayed graph computes the same layer: its last output still matches the reference.
    const int last = s.layers - 1;
    const double err = stack[last]->relative_error(stack[last]->output(m), MoeProblem::sample_tokens(m, 32));
    const bool replay_ok = std::isfinite(err) && err <= 1e-2;
    ok = ok && replay_ok;
    fmt::print("graph  {} layers x {} tokens: {:.1f} us per stack, {:.1f} us per layer, {:.0f} tokens/s "
               "(last layer after replay: relative error {:.2e} {})\n",
               s.layers, m, per_stack_us, per_stack_us / s.layers, m / (per_stack_us * 1e-6), err,
               replay_ok ? "PASS" : "FAIL");
    api.cuEventDestroy(start);
    api.cuEventDestroy(stop);
    api.cuGraphExecDestroy(exec);
    api.cuGraphDestroy(graph);
    api.cuStreamDestroy(stream);
    fmt::print("{}\n", ok ? "embed_engine: all checks passed" : "embed_engine: CHECK FAILED");
    return ok ? 0 : 2;
  } catch (const Error& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 2;
  }
}
