// moejit_bench: times moejit's kernels on the GPU against floors measured in the same run.
// Today it covers the whole routing (routing_topk on bf16 logits + routing_sort metadata); the MoE
// layer joins with the fused experts.
//
//   moejit_bench [--model config.json] [--tokens 1,16,128,1024,8192] [--json out.json] [--reps N]
//
// Floor = bytes the kernels must move / device-to-device copy bandwidth measured here. Times are the
// median over repetitions of one CUDA-graph replay holding `inner` back-to-back runs, divided by inner.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>

#include "common/files.h"
#include "common/options.h"
#include "runtime/device_buffer.h"
#include "runtime/model_config.h"
#include "runtime/router.h"
#include "runtime/runtime.h"

using namespace moejit;

namespace {
struct Shape {
  std::string name;
  RouterConfig router;
};

struct Events {
  DriverApi& api;
  CUevent start = nullptr, stop = nullptr;
  explicit Events(DriverApi& a) : api(a) {
    MOEJIT_CHECK_CU(api, Launch, cuEventCreate(&start, CU_EVENT_DEFAULT));
    MOEJIT_CHECK_CU(api, Launch, cuEventCreate(&stop, CU_EVENT_DEFAULT));
  }
  ~Events() {
    api.cuEventDestroy(start);
    api.cuEventDestroy(stop);
  }
  float ms() {
    MOEJIT_CHECK_CU(api, Launch, cuEventSynchronize(stop));
    float ms = 0;
    MOEJIT_CHECK_CU(api, Launch, cuEventElapsedTime(&ms, start, stop));
    return ms;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Bytes read + written per second by a large device-to-device copy.
double measure_copy_bandwidth(DriverApi& api, CUstream stream) {
  const std::size_t bytes = std::size_t(1) << 30;
  DeviceBuffer a(api, bytes), b(api, bytes);
  a.fill_u32(0x3f800001u);
  Events ev(api);
  std::vector<double> samples;
  for (int i = 0; i < 12; ++i) {
    MOEJIT_CHECK_CU(api, Launch, cuEventRecord(ev.start, stream));
    MOEJIT_CHECK_CU(api, Launch, cuMemcpyDtoD(b.ptr(), a.ptr(), bytes));
    MOEJIT_CHECK_CU(api, Launch, cuEventRecord(ev.stop, stream));
    if (i >= 2) samples.push_back(2.0 * bytes / (ev.ms() * 1e-3));
  }
  return median(samples);
}

// Random normal router logits as bf16 bits.
std::vector<unsigned short> random_bf16_logits(std::size_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, 2.f);
  std::vector<unsigned short> out(count);
  for (auto& v : out) {
    float f = normal(rng);
    unsigned int bits;
    std::memcpy(&bits, &f, 4);
    v = static_cast<unsigned short>(bits >> 16);
  }
  return out;
}

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(static_cast<int>(parse_int(item, "--tokens")));
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  std::vector<Shape> shapes = {
      {"Mixtral-8x7B", {.num_experts = 8, .top_k = 2}},
      {"Qwen3-30B-A3B", {.num_experts = 128, .top_k = 8}},
      {"gpt-oss-120b", {.num_experts = 128, .top_k = 4, .scoring = Scoring::SoftmaxAfterTopk}},
      {"DeepSeek-V2-Lite", {.num_experts = 64, .top_k = 6, .renormalize = false}},
      {"DeepSeek-V3", {.num_experts = 256, .top_k = 8, .scoring = Scoring::Sigmoid, .n_group = 8, .topk_group = 4,
                       .routed_scaling_factor = 2.5f}}};
  std::vector<int> token_counts = {1, 16, 128, 1024, 8192};
  std::string json_path;
  int reps = 20;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw Error(Phase::Validate, arg + " needs a value");
        return argv[++i];
      };
      if (arg == "--json") json_path = value();
      else if (arg == "--tokens") token_counts = parse_list(value());
      else if (arg == "--reps") reps = static_cast<int>(parse_int(value(), "--reps"));
      else if (arg == "--model") {
        auto m = ModelMoeConfig::from_file(value());
        shapes = {{m.model_type, m.router_config()}};
      } else if (arg == "--help") {
        fmt::print("usage: moejit_bench [--model config.json] [--tokens 1,16,...] [--reps N] [--json out.json]\n");
        return 0;
      } else {
        throw Error(Phase::Validate, "unknown argument " + arg);
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
    CUstream stream = nullptr;
    MOEJIT_CHECK_CU(api, Launch, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    const double bandwidth = measure_copy_bandwidth(api, nullptr);
    fmt::print("device: {} ({} SMs, {})  copy bandwidth (read+write): {:.0f} GB/s\n\n", info.name, info.sm_count,
               info.arch(), bandwidth / 1e9);
    fmt::print("{:<18} {:>4} {:>5} {:>6} {:>10} {:>10} {:>8}  {}\n", "routing (top-k+sort)", "E", "top_k", "M", "us",
               "floor us", "eff", "what");
    nlohmann::json results = nlohmann::json::array();
    std::mt19937 rng(1234);
    for (const auto& s : shapes) {
      const int E = s.router.num_experts, K = s.router.top_k;
      Router router(rt, s.router);
      router.prepare();
      for (int tokens : token_counts) {
        auto logits = random_bf16_logits(std::size_t(tokens) * E, rng);
        DeviceBuffer d_logits = DeviceBuffer::from(api, logits);
        std::vector<float> bias(E);
        for (int e = 0; e < E; ++e) bias[e] = 0.01f * float(e % 7);
        DeviceBuffer d_bias = DeviceBuffer::from(api, bias);
        const CUdeviceptr bias_ptr = s.router.scoring == Scoring::Sigmoid ? d_bias.ptr() : 0;
        DeviceBuffer ws(api, router.workspace_bytes(tokens));
        ws.fill_u32(0xdeadbeefu);
        auto out = router.carve(ws.ptr(), tokens);
        // Verify the metadata against the ids the top-k produced before timing (the top-k itself is
        // checked against the fp64 reference by the GPU tests): a fast wrong answer is no result.
        router.route(stream, d_logits.ptr(), E, bias_ptr, 0, tokens, tokens, out);
        auto got = router.sorter().download(out.sort, tokens);
        std::vector<int> ids(std::size_t(tokens) * K);
        if (tokens)
          MOEJIT_CHECK_CU(api, Launch, cuMemcpyDtoH(ids.data(), reinterpret_cast<CUdeviceptr>(out.topk_ids), ids.size() * 4));
        auto diff = describe_routing_difference(reference_routing_sort(ids, tokens, K, E, E, {}, s.router.block_m), got);
        if (!diff.empty()) throw Error(Phase::Launch, fmt::format("{} M={}: wrong result: {}", s.name, tokens, diff));
        const int inner = tokens <= 1024 ? 20 : 5;
        MOEJIT_CHECK_CU(api, Launch, cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
        for (int i = 0; i < inner; ++i) router.route(stream, d_logits.ptr(), E, bias_ptr, 0, tokens, tokens, out);
        CUgraph graph = nullptr;
        CUgraphExec exec = nullptr;
        MOEJIT_CHECK_CU(api, Launch, cuStreamEndCapture(stream, &graph));
        MOEJIT_CHECK_CU(api, Launch, cuGraphInstantiate(&exec, graph, 0));
        Events ev(api);
        std::vector<double> samples;
        for (int r = 0; r < reps + 3; ++r) {
          MOEJIT_CHECK_CU(api, Launch, cuEventRecord(ev.start, stream));
          MOEJIT_CHECK_CU(api, Launch, cuGraphLaunch(exec, stream));
          MOEJIT_CHECK_CU(api, Launch, cuEventRecord(ev.stop, stream));
          double us = ev.ms() * 1e3 / inner;
          if (r >= 3) samples.push_back(us);
        }
        api.cuGraphExecDestroy(exec);
        api.cuGraphDestroy(graph);
        const double us = median(samples);
        // Must move: logits in (bf16), ids + weights out, ids re-read, scatter index out, gather index
        // out (padded rows), per-expert counts/offsets/tiles.
        const double slots = double(tokens) * K;
        const double bytes = 2.0 * tokens * E + 4.0 * (4 * slots + router.sorter().gather_capacity(tokens) + 3.0 * E);
        const double floor_us = bytes / bandwidth * 1e6;
        fmt::print("{:<18} {:>4} {:>5} {:>6} {:>10.2f} {:>10.3f} {:>7.1f}%  4 kernels + memset, graph replay x{}\n",
                   s.name, E, K, tokens, us, floor_us, 100.0 * floor_us / us, inner);
        results.push_back({{"kernel", "routing"}, {"shape", s.name}, {"E", E}, {"top_k", K}, {"M", tokens}, {"us", us},
                           {"floor_us", floor_us}, {"efficiency", floor_us / us}});
      }
    }
    if (!json_path.empty()) {
      nlohmann::json doc = {{"device", info.name}, {"sm_count", info.sm_count}, {"arch", info.arch()},
                            {"copy_bandwidth_GBps", bandwidth / 1e9}, {"results", results}};
      write_file_synced(json_path, doc.dump(2));
      fmt::print("\nwrote {}\n", json_path);
    }
    api.cuStreamDestroy(stream);
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 2;
  }
}
