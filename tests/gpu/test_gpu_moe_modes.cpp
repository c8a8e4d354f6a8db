// MoE layer modes on the GPU: deterministic mode bitwise stable over runs and independent of the
// batch a token runs in, CUDA-graph replay equal to eager, unfused-mode injection points, M = 0,
// and bad input rejected before anything is launched.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>

#include "moe_gpu_util.h"
#include "support/moe_cases.h"
#include "support/test_support.h"

using namespace moejit;
using namespace moejit::test;

namespace {
MoeCase find_case(const std::string& name) {
  for (auto& c : moe_mode_cases())
    if (c.name == name) return c;
  FAIL("no mode case " << name);
  return {};
}
}  // namespace

TEST_CASE("gpu moe: deterministic mode is bitwise stable and independent of batching") {
  Runtime rt(test_options(""));
  if (!gpu_or_skip(rt, "gpu moe deterministic")) return;
  const MoeCase c = find_case("deterministic");
  const int big = 4096;
  MoeRun r = make_moe_run(rt, c.spec, big, 21);
  r.layer->prepare(big);
  CHECK(within_band(forward_and_check(r, big, true)));
  const auto first = r.problem->output_bits(big);
  for (int run = 1; run < 20; ++run) {
    r.problem->poison();
    r.layer->forward(nullptr, r.problem->args(big, true));
    const auto again = r.problem->output_bits(big);
    REQUIRE_MESSAGE(again == first, "run " << run << " differs from run 0");
  }
  // Token t alone (M = 1, the smallest tile config) equals its row in the batch of 4096 (M = 4096,
  // the largest), and so does a batch of 333 starting at t.
  const std::size_t K = c.spec.hidden, k = c.spec.top_k;
  auto& api = rt.driver();
  DeviceBuffer out(api, K * 2 * 333);
  for (int t : {0, 1, 777, 4095 - 333}) {
    for (int m : {1, 333}) {
      MoeForwardArgs a = r.problem->args(m, true);
      a.hidden.data += std::size_t(t) * K * 2;
      a.topk_ids.data += std::size_t(t) * k * 4;
      a.topk_weights.data += std::size_t(t) * k * 4;
      out.fill_u32(0x7fc07fc0u);
      a.out.data = out.ptr();
      r.layer->forward(nullptr, a);
      const auto alone = out.to_vector<std::uint16_t>(std::size_t(m) * K);
      const bool same = std::equal(alone.begin(), alone.end(), first.begin() + std::size_t(t) * K);
      INFO(fmt::format("tokens [{}, {}) as a batch of {} ({}) vs in the batch of {} ({})", t, t + m, m,
                       r.layer->tile_config(m).describe(), big, r.layer->tile_config(big).describe()));
      CHECK(same);
    }
  }
}

TEST_CASE("gpu moe: CUDA graph capture + replay equals eager") {
  Runtime rt(test_options(""));
  if (!gpu_or_skip(rt, "gpu moe graph")) return;
  auto& api = rt.driver();
  auto replay_equals_eager = [&](const char* name, int m, bool decode_gemv) {
    const MoeCase c = find_case(name);
    {
      MoeRun r = make_moe_run(rt, c.spec, m, 31);
      r.layer->prepare(m);
      CHECK(r.layer->tile_config(m).gemv == decode_gemv);
      CUstream stream = nullptr;
      REQUIRE(api.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
      r.problem->poison();
      r.layer->forward(stream, r.problem->args(m, false));
      REQUIRE(api.cuStreamSynchronize(stream) == CUDA_SUCCESS);
      const auto eager = r.problem->output_bits(m);
      r.problem->poison();
      CUgraph graph = nullptr;
      CUgraphExec exec = nullptr;
      REQUIRE(api.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS);
      r.layer->forward(stream, r.problem->args(m, false));
      REQUIRE(api.cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
      REQUIRE(api.cuGraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS);
      for (int replay = 0; replay < 3; ++replay) REQUIRE(api.cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
      REQUIRE(api.cuStreamSynchronize(stream) == CUDA_SUCCESS);
      INFO(fmt::format("{} M={}", name, m));
      CHECK(r.problem->output_bits(m) == eager);
      api.cuGraphExecDestroy(exec);
      api.cuGraphDestroy(graph);
      api.cuStreamDestroy(stream);
    }
  };
  for (const char* name : {"deterministic", "expert parallel E=64 top_k=8 K=512 N=256 silu_mul bf16 deterministic"})
    for (int m : {1, 333}) replay_equals_eager(name, m, false);
  // The fast mode's decode GEMV (the heuristic's pick at M = 1 on these): one summation order, so
  // replays equal eager bitwise too (the grouped fast path adds fp32 atomically: not bitwise).
  for (const char* name : {"expert parallel E=64 top_k=8 K=512 N=256 silu_mul bf16", "llama-4 style"})
    replay_equals_eager(name, 1, true);
}

TEST_CASE("gpu moe: unfused mode calls its injection points in order, and they take effect") {
  Runtime rt(test_options(""));
  if (!gpu_or_skip(rt, "gpu moe unfused hooks")) return;
  const MoeCase c = find_case("unfused hooks");
  const int m = 64;
  MoeRun r = make_moe_run(rt, c.spec, m, 41);
  auto& api = rt.driver();
  std::vector<std::string> calls;
  MoeStageHooks hooks;
  hooks.after_gemm1 = [&](CUstream, const MoeStageBuffers& b) {
    calls.push_back("gemm1");
    CHECK(b.gemm1_out != 0);
  };
  hooks.after_activation = [&](CUstream, const MoeStageBuffers&) { calls.push_back("activation"); };
  hooks.after_gemm2 = [&](CUstream, const MoeStageBuffers& b) {
    calls.push_back("gemm2");
    CHECK(b.slot_rows != 0);
  };
  r.problem->poison();
  r.layer->forward(nullptr, r.problem->args(m, true), &hooks);
  r.problem->use_generated_topk();
  CHECK(calls == std::vector<std::string>{"gemm1", "activation", "gemm2"});
  CHECK(within_band(r.problem->relative_error(r.problem->output(m), MoeProblem::sample_tokens(m, 64))));

  // An injection that zeroes the intermediate (no bias in this spec) zeroes the output.
  MoeStageHooks zero;
  zero.after_activation = [&](CUstream stream, const MoeStageBuffers& b) {
    REQUIRE(api.cuMemsetD32Async(b.intermediate, 0, b.max_rows * c.spec.intermediate / 2, stream) == CUDA_SUCCESS);
  };
  r.problem->poison();
  r.layer->forward(nullptr, r.problem->args(m, true), &zero);
  const auto out = r.problem->output(m);
  CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == 0.f; }));
}

TEST_CASE("gpu moe: M = 0 is a no-op; bad input is rejected before any launch") {
  Runtime rt(test_options(""));
  if (!gpu_or_skip(rt, "gpu moe edge cases")) return;
  const MoeCase c = find_case("deterministic");
  MoeRun r = make_moe_run(rt, c.spec, 64, 51);
  r.problem->poison();
  r.layer->forward(nullptr, r.problem->args(0, false));
  r.layer->forward(nullptr, r.problem->args(0, true));
  MoeForwardArgs bad = r.problem->args(64, true);
  bad.w2.shape[2] += 8;  // wrong N
  CHECK_THROWS_AS(r.layer->forward(nullptr, bad), Error);
  bad = r.problem->args(64, true);
  bad.workspace_size -= 256;
  CHECK_THROWS_AS(r.layer->forward(nullptr, bad), Error);
  // Nothing ran: the output is still poisoned.
  const auto out = r.problem->output_bits(64);
  CHECK(std::all_of(out.begin(), out.end(), [](std::uint16_t b) { return b == 0x7fc0; }));
  // Out-of-range caller ids are reported, not a crash.
  MoeForwardArgs ids = r.problem->args(64, true);
  std::vector<int> host_ids(64 * c.spec.top_k, 3);
  for (int s = 0; s < c.spec.top_k; ++s) host_ids[s] = s;
  host_ids[5 * c.spec.top_k] = 999;
  DeviceBuffer d_ids = DeviceBuffer::from(rt.driver(), host_ids);
  ids.topk_ids.data = d_ids.ptr();
  r.layer->forward(nullptr, ids);
  CHECK((r.layer->routing_error_flags(ids) & kRoutingBadExpertId) != 0);
}
