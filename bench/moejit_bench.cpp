// moejit_bench: times moejit's kernels on the GPU against floors measured in the same run.
// Today it covers the routing metadata (routing_sort); the MoE layer joins with the fused experts.
//
//   moejit_bench [--model config.json] [--tokens 1,16,128,1024,8192] [--json out.json] [--reps N]
//
// Floor = bytes the kernels must move / device-to-device copy bandwidth measured here. Times are the
// median over repetitions of one CUDA-graph replay holding `inner` back-to-back runs, divided by inner.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <sstream>

#include "common/files.h"
#include "common/options.h"
#include "runtime/device_buffer.h"
#include "runtime/model_config.h"
#include "runtime/routing_sort_launcher.h"
#include "runtime/runtime.h"

using namespace moejit;

namespace {
struct Shape {
  std::string name;
  int experts, top_k;
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

std::vector<int> random_ids(int tokens, int top_k, int experts, std::mt19937& rng) {
  std::vector<int> ids(std::size_t(tokens) * top_k);
  std::vector<int> perm(experts);
  std::iota(perm.begin(), perm.end(), 0);
  for (int t = 0; t < tokens; ++t)
    for (int k = 0; k < top_k; ++k) {
      std::uniform_int_distribution<int> pick(k, experts - 1);
      std::swap(perm[k], perm[pick(rng)]);
      ids[std::size_t(t) * top_k + k] = perm[k];
    }
  return ids;
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
  std::vector<Shape> shapes = {{"Mixtral-8x7B", 8, 2},     {"Qwen3-30B-A3B", 128, 8}, {"gpt-oss-120b", 128, 4},
                               {"DeepSeek-V2-Lite", 64, 6}, {"DeepSeek-V3", 256, 8}};
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
        shapes = {{m.model_type, m.num_experts, m.top_k}};
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
    fmt::print("{:<18} {:>4} {:>5} {:>6} {:>10} {:>10} {:>8}  {}\n", "routing_sort", "E", "top_k", "M", "us",
               "floor us", "eff", "what");
    nlohmann::json results = nlohmann::json::array();
    std::mt19937 rng(1234);
    for (const auto& s : shapes) {
      RoutingSorter sorter(rt, {.num_experts = s.experts, .top_k = s.top_k, .block_m = 64});
      sorter.prepare();
      for (int tokens : token_counts) {
        auto ids = random_ids(tokens, s.top_k, s.experts, rng);
        DeviceBuffer d_ids = DeviceBuffer::from(api, ids);
        DeviceBuffer ws(api, sorter.workspace_bytes(tokens));
        ws.fill_u32(0xdeadbeefu);
        auto b = sorter.carve(ws.ptr(), tokens);
        // Verify once before timing: a fast wrong answer is not a result.
        sorter.run(stream, d_ids.ptr(), 0, tokens, tokens, b);
        auto diff = describe_routing_difference(
            reference_routing_sort(ids, tokens, s.top_k, s.experts, s.experts, {}, 64), sorter.download(b, tokens));
        if (!diff.empty()) throw Error(Phase::Launch, fmt::format("{} M={}: wrong result: {}", s.name, tokens, diff));
        const int inner = tokens <= 1024 ? 20 : 5;
        MOEJIT_CHECK_CU(api, Launch, cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
        for (int i = 0; i < inner; ++i) sorter.run(stream, d_ids.ptr(), 0, tokens, tokens, b);
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
        // Must move: ids in, scatter index out, gather index out (padded rows), counts/offsets/tiles.
        const double slots = double(tokens) * s.top_k;
        const double bytes = 4.0 * (slots + slots + sorter.gather_capacity(tokens) + 3.0 * s.experts);
        const double floor_us = bytes / bandwidth * 1e6;
        fmt::print("{:<18} {:>4} {:>5} {:>6} {:>10.2f} {:>10.3f} {:>7.1f}%  3 kernels, graph replay x{}\n", s.name,
                   s.experts, s.top_k, tokens, us, floor_us, 100.0 * floor_us / us, inner);
        results.push_back({{"kernel", "routing_sort"}, {"shape", s.name}, {"E", s.experts}, {"top_k", s.top_k},
                           {"M", tokens}, {"us", us}, {"floor_us", floor_us}, {"efficiency", floor_us / us}});
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
