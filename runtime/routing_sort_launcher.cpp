#include "runtime/routing_sort_launcher.h"

#include "jit/families.h"
#include "jit/moe_names.h"
#include "runtime/runtime.h"

namespace moejit {

namespace {
constexpr std::size_t kAlign = 256;
std::size_t align_up(std::size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }
std::size_t ceil_div(std::size_t a, std::size_t b) { return (a + b - 1) / b; }
}  // namespace

RoutingSorter::RoutingSorter(Runtime& runtime, RoutingSortConfig c) : runtime_(runtime), config_(c) {
  MOEJIT_REQUIRE(c.num_experts >= 1 && c.num_experts <= kMaxExperts,
                 "routing: num_experts = {} must be in [1, {}]", c.num_experts, kMaxExperts);
  MOEJIT_REQUIRE(c.top_k >= 1 && c.top_k <= 32, "routing: top_k = {} must be in [1, 32]", c.top_k);
  MOEJIT_REQUIRE(c.top_k <= c.num_experts, "routing: top_k = {} exceeds num_experts = {}", c.top_k, c.num_experts);
  MOEJIT_REQUIRE(c.block_m >= 1 && c.block_m <= 1024, "routing: block_m = {} must be in [1, 1024]", c.block_m);
  if (config_.num_local_experts < 0) config_.num_local_experts = c.num_experts;
  if (config_.min_block_m == 0) config_.min_block_m = c.block_m;
  MOEJIT_REQUIRE(config_.min_block_m >= 1 && config_.min_block_m <= c.block_m,
                 "routing: min_block_m = {} must be in [1, block_m = {}]", config_.min_block_m, c.block_m);
  MOEJIT_REQUIRE(config_.num_local_experts >= 1 && config_.num_local_experts <= c.num_experts,
                 "routing: num_local_experts = {} must be in [1, num_experts = {}]", config_.num_local_experts,
                 c.num_experts);
  // Completing the spec checks tokens_per_cta * top_k against the family's limits.
  const KernelSpec s = spec("sm_80");
  threads_ = static_cast<int>(s.get_int("threads"));
  padded_ = static_cast<int>(s.get_int("padded"));
}

KernelSpec RoutingSorter::spec_for(const RoutingSortConfig& c, const std::string& arch) {
  return complete_spec(
      {"routing_sort", arch, {{"top_k", std::int64_t(c.top_k)}, {"tokens_per_cta", std::int64_t(c.tokens_per_cta)}}});
}

std::size_t RoutingSorter::gather_capacity(int max_tokens) const {
  // Each local expert adds at most block_m - 1 padding rows.
  const std::size_t rows = std::size_t(max_tokens) * config_.top_k +
                           std::size_t(config_.num_local_experts) * (config_.block_m - 1);
  return ceil_div(rows, config_.block_m) * config_.block_m;
}

std::size_t RoutingSorter::max_tiles(int max_tokens) const {
  return ceil_div(gather_capacity(max_tokens), config_.min_block_m);
}

RoutingSortBuffers RoutingSorter::layout(CUdeviceptr workspace, int max_tokens, std::size_t* total_bytes) const {
  MOEJIT_REQUIRE(max_tokens >= 0, "routing: max_tokens = {} is negative", max_tokens);
  MOEJIT_REQUIRE(std::size_t(max_tokens) * config_.top_k < (std::size_t(1) << 31),
                 "routing: max_tokens * top_k = {} exceeds int32 indexing", std::size_t(max_tokens) * config_.top_k);
  const std::size_t e = config_.num_local_experts;
  const std::size_t ctas = ceil_div(std::size_t(max_tokens), config_.tokens_per_cta);
  RoutingSortBuffers b;
  std::size_t offset = 0;
  auto take = [&](int*& field, std::size_t count) {
    field = workspace ? reinterpret_cast<int*>(workspace + offset) : nullptr;
    offset += align_up(std::max<std::size_t>(count, 1) * sizeof(int));
  };
  take(b.cta_counts, ctas * e);
  take(b.expert_counts, e);
  take(b.expert_offsets, e + 1);
  take(b.padded_offsets, e + 1);
  take(b.gather_index, gather_capacity(max_tokens));
  take(b.scatter_index, std::size_t(max_tokens) * config_.top_k);
  take(b.tile_expert, max_tiles(max_tokens));
  take(b.tile_rows, max_tiles(max_tokens));
  take(b.totals, kRoutingTotals);
  take(b.cta_flags, ctas);
  take(b.error_flags, 1);
  if (total_bytes) *total_bytes = offset;
  return b;
}

RoutingSortBuffers RoutingSorter::carve(CUdeviceptr workspace, int max_tokens) const {
  MOEJIT_REQUIRE(workspace != 0, "routing: workspace is null");
  MOEJIT_REQUIRE(workspace % kAlign == 0, "routing: workspace must be {}-byte aligned", kAlign);
  return layout(workspace, max_tokens, nullptr);
}

std::size_t RoutingSorter::workspace_bytes(int max_tokens) const {
  std::size_t total = 0;
  layout(0, max_tokens, &total);
  return total;
}

void RoutingSorter::prepare() {
  if (module_) return;
  const std::string arch = runtime_.device_arch();
  module_ = runtime_.load(spec(arch));
  overlap_launches_ = arch_has_dependent_launch(arch);
}

RoutingSortArgs RoutingSorter::make_args(CUdeviceptr topk_ids, CUdeviceptr expert_map, int num_tokens, int max_tokens,
                                         const RoutingSortBuffers& b, int block_m) const {
  if (block_m == 0) block_m = config_.block_m;
  MOEJIT_REQUIRE(block_m >= config_.min_block_m && block_m <= config_.block_m,
                 "routing: block_m = {} must be in [{}, {}] (the range the workspace was sized for)", block_m,
                 config_.min_block_m, config_.block_m);
  MOEJIT_REQUIRE(num_tokens >= 0 && num_tokens <= max_tokens,
                 "routing: num_tokens = {} must be in [0, max_tokens = {}]", num_tokens, max_tokens);
  MOEJIT_REQUIRE(num_tokens == 0 || topk_ids != 0, "routing: topk_ids is null");
  MOEJIT_REQUIRE(config_.num_local_experts == config_.num_experts || expert_map != 0,
                 "routing: num_local_experts = {} < num_experts = {} needs an expert_map",
                 config_.num_local_experts, config_.num_experts);
  MOEJIT_REQUIRE(b.totals != nullptr && b.gather_index != nullptr, "routing: buffers were not carved from a workspace");
  RoutingSortArgs a{};
  a.topk_ids = reinterpret_cast<const int*>(topk_ids);
  a.expert_map = reinterpret_cast<const int*>(expert_map);
  a.num_tokens = num_tokens;
  a.num_experts = config_.num_experts;
  a.num_local_experts = config_.num_local_experts;
  a.block_m = block_m;
  a.num_ctas = static_cast<int>(ceil_div(std::size_t(num_tokens), config_.tokens_per_cta));
  a.cta_counts = b.cta_counts;
  a.expert_counts = b.expert_counts;
  a.expert_offsets = b.expert_offsets;
  a.padded_offsets = b.padded_offsets;
  a.gather_index = b.gather_index;
  a.scatter_index = b.scatter_index;
  a.tile_expert = b.tile_expert;
  a.tile_rows = b.tile_rows;
  a.totals = b.totals;
  a.cta_flags = b.cta_flags;
  a.error_flags = b.error_flags;
  return a;
}

void RoutingSorter::run(CUstream stream, CUdeviceptr topk_ids, CUdeviceptr expert_map, int num_tokens,
                        int max_tokens, const RoutingSortBuffers& b, int block_m) {
  const RoutingSortArgs a = make_args(topk_ids, expert_map, num_tokens, max_tokens, b, block_m);
  prepare();
  if (a.num_ctas > 0) {
    const unsigned smem = routing_rank_smem_bytes(padded_, config_.num_local_experts);
    module_->kernel("count").launch(stream, {unsigned(a.num_ctas), 1, 1, unsigned(threads_), 1, 1, smem}, a);
  }
  finish(stream, a);
}

void RoutingSorter::finish(CUstream stream, const RoutingSortArgs& a) {
  prepare();
  const unsigned scan_ctas = static_cast<unsigned>(routing_scan_ctas(config_.num_local_experts));
  // Scan and scatter start under the previous kernel's tail and wait for it on the device
  // (wait_for_previous_kernel): one launch latency less per stage on sm_90+.
  module_->kernel("scan").launch(
      stream,
      {scan_ctas, 1, 1, kRoutingScanThreads, 1, 1, routing_scan_smem_bytes(kRoutingScanThreads), overlap_launches_}, a);
  const unsigned scatter_ctas =
      static_cast<unsigned>(routing_scatter_ctas(static_cast<long long>(a.num_tokens) * config_.top_k));
  module_->kernel("scatter").launch(stream,
                                    {scatter_ctas, 1, 1, kRoutingScatterThreads, 1, 1,
                                     routing_scatter_smem_bytes(config_.num_local_experts), overlap_launches_},
                                    a);
}

RoutingSortReference RoutingSorter::download(const RoutingSortBuffers& b, int num_tokens) const {
  auto& api = runtime_.driver();
  MOEJIT_CHECK_CU(api, Launch, cuCtxSynchronize());
  auto read = [&](const int* ptr, std::size_t count) {
    std::vector<int> out(count);
    if (count) MOEJIT_CHECK_CU(api, Launch, cuMemcpyDtoH(out.data(), reinterpret_cast<CUdeviceptr>(ptr), count * sizeof(int)));
    return out;
  };
  const std::size_t e = config_.num_local_experts;
  RoutingSortReference r;
  auto totals = read(b.totals, 3);
  r.routed_rows = totals[0];
  r.padded_rows = totals[1];
  r.tiles = totals[2];
  r.bad_ids = read(b.error_flags, 1)[0] != 0;
  r.expert_counts = read(b.expert_counts, e);
  r.expert_offsets = read(b.expert_offsets, e + 1);
  r.padded_offsets = read(b.padded_offsets, e + 1);
  // Every tile has the same block_m (the run's), so padded rows are a whole number of tiles.
  MOEJIT_REQUIRE(r.padded_rows >= 0 && r.tiles >= 0 && (r.tiles == 0) == (r.padded_rows == 0) &&
                     (r.tiles == 0 || r.padded_rows % r.tiles == 0) && std::size_t(r.tiles) <= max_tiles(num_tokens),
                 "routing: device totals are inconsistent (padded rows {}, tiles {})", r.padded_rows, r.tiles);
  r.gather_index = read(b.gather_index, r.padded_rows);
  r.scatter_index = read(b.scatter_index, std::size_t(num_tokens) * config_.top_k);
  r.tile_expert = read(b.tile_expert, r.tiles);
  r.tile_rows = read(b.tile_rows, r.tiles);
  return r;
}

}  // namespace moejit
