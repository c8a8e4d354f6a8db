// routing_sort on the GPU against the CPU reference: every top_k shape class, many E and M, expert
// parallelism, skewed routing, bad ids, M = 0, and CUDA-graph replay equal to eager.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <numeric>
#include <random>

#include "runtime/device_buffer.h"
#include "runtime/routing_sort_launcher.h"
#include "support/test_support.h"

using namespace moejit;

namespace {
std::vector<int> random_ids(int tokens, int top_k, int experts, std::mt19937& rng, bool all_one_expert = false) {
  std::vector<int> ids(std::size_t(tokens) * top_k);
  std::vector<int> perm(experts);
  std::iota(perm.begin(), perm.end(), 0);
  for (int t = 0; t < tokens; ++t)
    for (int k = 0; k < top_k; ++k) {
      std::uniform_int_distribution<int> pick(k, experts - 1);
      std::swap(perm[k], perm[pick(rng)]);
      ids[std::size_t(t) * top_k + k] = all_one_expert && k == 0 ? 0 : perm[k];
    }
  if (all_one_expert)  // slot 0 of every token goes to expert 0; others stay distinct from it
    for (int t = 0; t < tokens; ++t)
      for (int k = 1; k < top_k; ++k)
        if (ids[std::size_t(t) * top_k + k] == 0) ids[std::size_t(t) * top_k + k] = ids[std::size_t(t) * top_k];
  return ids;
}

std::string check_case(Runtime& rt, const RoutingSortConfig& c, int tokens, const std::vector<int>& ids,
                       const std::vector<int>& expert_map) {
  RoutingSorter sorter(rt, c);
  DeviceBuffer d_ids = DeviceBuffer::from(rt.driver(), ids);
  DeviceBuffer d_map = DeviceBuffer::from(rt.driver(), expert_map);
  DeviceBuffer ws(rt.driver(), sorter.workspace_bytes(tokens));
  ws.fill_u32(0xdeadbeefu);
  auto b = sorter.carve(ws.ptr(), tokens);
  sorter.run(nullptr, tokens ? d_ids.ptr() : 0, expert_map.empty() ? 0 : d_map.ptr(), tokens, tokens, b);
  auto got = sorter.download(b, tokens);
  auto want = reference_routing_sort(ids, tokens, c.top_k, c.num_experts, sorter.config().num_local_experts,
                                     expert_map, c.block_m);
  return describe_routing_difference(want, got);
}
}  // namespace

TEST_CASE("routing_sort matches the reference for top_k 1..10, 16, 32 across E and M") {
  test::ScratchDir dir("gpu-routing");
  Runtime rt(test::test_options(dir.path()));
  if (!test::gpu_or_skip(rt, "routing_sort vs reference")) return;
  std::mt19937 rng(7);
  int cases = 0;
  for (int top_k : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 16, 32})
    for (int experts : {8, 32, 60, 64, 128, 160, 256, 384, 512}) {
      if (top_k > experts) continue;
      for (int tokens : {1, 2, 31, 64, 1000, 16384}) {
        if (std::size_t(tokens) * top_k > 200000 && experts != 256) continue;  // keep the suite quick
        int block_m = (cases % 3 == 0) ? 16 : (cases % 3 == 1) ? 64 : 128;
        auto ids = random_ids(tokens, top_k, experts, rng);
        std::string diff = check_case(rt, {.num_experts = experts, .top_k = top_k, .block_m = block_m}, tokens, ids, {});
        INFO(fmt::format("top_k={} E={} M={} block_m={}", top_k, experts, tokens, block_m));
        CHECK(diff == "");
        ++cases;
      }
    }
  MESSAGE(cases << " routing_sort cases checked");
}

TEST_CASE("routing_sort: all tokens to one expert, expert_map with half remote, bad ids, M = 0") {
  test::ScratchDir dir("gpu-routing-edge");
  Runtime rt(test::test_options(dir.path()));
  if (!test::gpu_or_skip(rt, "routing_sort edge cases")) return;
  std::mt19937 rng(11);
  for (int tokens : {1, 333, 16384}) {
    auto ids = random_ids(tokens, 6, 64, rng, /*all_one_expert=*/true);
    INFO("all to one expert, M=" << tokens);
    CHECK(check_case(rt, {.num_experts = 64, .top_k = 6, .block_m = 64}, tokens, ids, {}) == "");
  }
  // Expert parallelism: odd global experts live here (local id = global / 2), even ones are remote.
  std::vector<int> map(128);
  for (int e = 0; e < 128; ++e) map[e] = e % 2 ? e / 2 : -1;
  for (int tokens : {1, 64, 4096}) {
    auto ids = random_ids(tokens, 8, 128, rng);
    INFO("half remote, M=" << tokens);
    CHECK(check_case(rt, {.num_experts = 128, .top_k = 8, .block_m = 32, .num_local_experts = 64}, tokens, ids, map) == "");
  }
  auto ids = random_ids(100, 4, 16, rng);
  ids[17] = 16;   // out of range
  ids[42] = -3;   // negative
  CHECK(check_case(rt, {.num_experts = 16, .top_k = 4, .block_m = 8}, 100, ids, {}) == "");
  CHECK(check_case(rt, {.num_experts = 16, .top_k = 4, .block_m = 8}, 0, {}, {}) == "");
}

TEST_CASE("routing_sort captured in a CUDA graph replays identically to eager") {
  test::ScratchDir dir("gpu-routing-graph");
  Runtime rt(test::test_options(dir.path()));
  if (!test::gpu_or_skip(rt, "routing_sort graph capture")) return;
  auto& api = rt.driver();
  std::mt19937 rng(5);
  const int tokens = 3000, top_k = 6, experts = 64;
  RoutingSorter sorter(rt, {.num_experts = experts, .top_k = top_k, .block_m = 64});
  sorter.prepare();
  auto ids = random_ids(tokens, top_k, experts, rng);
  DeviceBuffer d_ids = DeviceBuffer::from(api, ids);
  DeviceBuffer ws(api, sorter.workspace_bytes(tokens));
  ws.fill_u32(0xdeadbeefu);
  auto b = sorter.carve(ws.ptr(), tokens);

  CUstream stream = nullptr;
  REQUIRE(api.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  REQUIRE(api.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS);
  sorter.run(stream, d_ids.ptr(), 0, tokens, tokens, b);
  CUgraph graph = nullptr;
  REQUIRE(api.cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  REQUIRE(api.cuGraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS);
  // Nothing ran during capture: the poison is still there.
  CHECK(ws.to_vector<unsigned>(1)[0] == 0xdeadbeefu);
  REQUIRE(api.cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
  REQUIRE(api.cuStreamSynchronize(stream) == CUDA_SUCCESS);
  auto replayed = sorter.download(b, tokens);
  auto want = reference_routing_sort(ids, tokens, top_k, experts, experts, {}, 64);
  CHECK(describe_routing_difference(want, replayed) == "");
  // New ids in the same buffer: a replay sees them (the graph holds pointers, not values).
  auto ids2 = random_ids(tokens, top_k, experts, rng);
  d_ids.upload(ids2.data(), ids2.size() * sizeof(int));
  ws.fill_u32(0xdeadbeefu);
  REQUIRE(api.cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
  REQUIRE(api.cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(describe_routing_difference(reference_routing_sort(ids2, tokens, top_k, experts, experts, {}, 64),
                                    sorter.download(b, tokens)) == "");
  api.cuGraphExecDestroy(exec);
  api.cuGraphDestroy(graph);
  api.cuStreamDestroy(stream);
}
