// GPU smoke test: compile with NVRTC, load with the driver, launch, check the output. Skipped with
// a visible message on machines without a GPU.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include "jit/families.h"
#include "runtime/device_buffer.h"
#include "runtime/routing_sort_launcher.h"
#include "support/test_support.h"

using namespace moejit;

TEST_CASE("gpu smoke: device query, compile, load, launch, verify") {
  test::ScratchDir dir("gpu-smoke");
  Runtime rt(test::test_options(dir.path()));
  if (!test::gpu_or_skip(rt, "gpu smoke")) return;
  const DeviceInfo& info = rt.device().info();
  MESSAGE(fmt::format("device: {} cc {}.{} SMs {} L2 {} B smem opt-in {} B -> {}", info.name, info.cc_major,
                      info.cc_minor, info.sm_count, info.l2_bytes, info.max_shared_per_block_optin, info.arch()));
  CHECK(info.sm_count > 0);

  auto module = rt.load(make_spec("routing_sort", rt.device_arch(), {{"top_k", "6"}}));
  for (const char* name : {"count", "scan", "scatter"}) {
    const auto& r = module->kernel(name).resources();
    MESSAGE(fmt::format("{}: {} registers, {} B static smem, {} B local", name, r.registers, r.static_shared_bytes,
                        r.local_bytes));
    CHECK(r.registers > 0);
    CHECK(r.local_bytes == 0);
  }
  // Second load comes from the per-context module cache.
  CHECK(rt.load(make_spec("routing_sort", rt.device_arch(), {{"top_k", "6"}})) == module);

  // Two tokens routed by hand, E = 4, top_k = 6 is impossible (top_k <= E), so E = 8.
  RoutingSorter sorter(rt, {.num_experts = 8, .top_k = 6, .block_m = 4});
  std::vector<int> ids = {7, 1, 2, 3, 4, 5,   // token 0
                          1, 0, 7, 6, 2, 3};  // token 1
  DeviceBuffer d_ids = DeviceBuffer::from(rt.driver(), ids);
  DeviceBuffer ws(rt.driver(), sorter.workspace_bytes(2));
  ws.fill_u32(0xdeadbeefu);
  auto buffers = sorter.carve(ws.ptr(), 2);
  sorter.run(nullptr, d_ids.ptr(), 0, 2, 2, buffers);
  auto got = sorter.download(buffers, 2);
  auto want = reference_routing_sort(ids, 2, 6, 8, 8, {}, 4);
  CHECK(describe_routing_difference(want, got) == "");
  CHECK(got.expert_counts == std::vector<int>{1, 2, 2, 2, 1, 1, 1, 2});
}
