// The MoE layer's workspace: how one forward's buffers are carved out of the caller's workspace
// (routing, intermediate, accumulator or slot rows, split-K and per-tile counters, fp8 copies), and
// the routing results read back from it.
#include <algorithm>
#include <vector>

#include "common/error.h"
#include "runtime/moe_layer.h"
#include "runtime/moe_layer_parts.h"
#include "runtime/runtime.h"
#include "templates/moe/moe_gemm_args.cuh"

namespace moejit {

namespace {
constexpr std::size_t kAlign = 256;
std::size_t align_up(std::size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }
}  // namespace

MoeLayer::Workspace MoeLayer::carve(const MoeForwardArgs& args, int m) const {
  Workspace w;
  std::size_t offset = align_up(router_.workspace_bytes(m));
  if (args.workspace != 0) w.routing = router_.carve(args.workspace, m);
  w.max_rows = router_.sorter().gather_capacity(m);
  auto take = [&](CUdeviceptr& field, std::size_t bytes) {
    field = args.workspace ? args.workspace + offset : 0;
    offset += align_up(std::max<std::size_t>(bytes, 1));
  };
  const std::size_t elem = 2, K = spec_.hidden, N = spec_.intermediate, M = std::size_t(m);
  if (!spec_.fused) take(w.gemm1_out, w.max_rows * spec_.w1_rows() * elem);
  take(w.intermediate, w.max_rows * N * elem);
  const bool accumulator = spec_.fused && spec_.reduce == ReduceMode::Fast;
  // GEMM1 split-K is possible up to split_tokens tokens; its buffers are sized for min(M, that), so
  // that the workspace never shrinks as M grows (callers size it for their largest batch).
  const std::size_t partial_per_token = kMoeMaxSplitK * spec_.top_k * spec_.w1_rows() * sizeof(float);
  const std::size_t split_tokens = std::min<std::size_t>(M, kSplitKPartialCapBytes / partial_per_token);
  const bool split_buffers = accumulator && split_tokens > 0;
  // Fast mode: GEMM1's split-K arrival counters, the swap-AB pair's per-tile counters, then the
  // fp32 accumulator, zeroed together (zeroed .. zeroed + zeroed_bytes) by a memset or the route.
  const std::size_t zeroed_at = offset;
  if (split_buffers) {
    w.gemm1_split = M <= split_tokens;
    // One counter per (row tile, column tile) of any config: most tiles at block_m 16, most column
    // tiles at block_n 16.
    const std::size_t rows = split_tokens * spec_.top_k;
    const std::size_t tiles = rows / kMoeMinBlockM + std::min<std::size_t>(rows, spec_.local_experts()) + 1;
    take(w.split_counters, tiles * ((spec_.w1_rows() + 15) / 16) * sizeof(int));
  }
  if (accumulator) {  // most row tiles of any config: those of the smallest block_m
    const long long tiles = moe_max_row_tiles(static_cast<long long>(M) * spec_.top_k, spec_.local_experts(), kMoeMinBlockM);
    take(w.tile_ready, static_cast<std::size_t>(tiles) * sizeof(int));
  }
  // Slots: fast mode, the fp32 accumulator [M, K] or GEMM2's DTYPE rows by slot [M * top_k, K] (the
  // tile config picks: TopkSum); deterministic / unfused, fp32 rows by slot.
  const std::size_t slots_at = offset;
  const std::size_t accumulator_bytes = M * K * sizeof(float);
  // GEMM1's X gathered into padded-row order (GemmTile::pregather) lives in the slots buffer too: it
  // is dead once GEMM1 has read it, before GEMM2 writes there. Reserved where the padding at most
  // doubles the routed rows (prefill); smaller batches keep GEMM1's per-row gather (same results).
  w.pregather = accumulator && w.max_rows <= 2 * M * spec_.top_k;
  const std::size_t pregathered_bytes = w.pregather ? w.max_rows * K * quant_activation_bytes(spec_.quant) : 0;
  take(w.slots, accumulator ? std::max({accumulator_bytes, M * spec_.top_k * K * elem, pregathered_bytes})
                            : M * spec_.top_k * K * sizeof(float));
  w.zeroed = args.workspace ? args.workspace + zeroed_at : 0;
  w.zeroed_bytes = slots_at + (accumulator ? accumulator_bytes : 0) - zeroed_at;
  if (split_buffers) take(w.split_partial, split_tokens * partial_per_token);
  if (quant_is_fp8(spec_.quant)) {
    take(w.hidden_q, M * K);
    take(w.hidden_scale, M * act_scales_per_row(spec_.quant, K) * sizeof(float));
    take(w.intermediate_q, w.max_rows * N);
    take(w.intermediate_scale, w.max_rows * act_scales_per_row(spec_.quant, N) * sizeof(float));
  }
  w.total = offset;
  return w;
}

std::size_t MoeLayer::workspace_bytes(int num_tokens) const {
  MOEJIT_REQUIRE(num_tokens >= 0, "moe: workspace_bytes(num_tokens = {}) is negative", num_tokens);
  return carve(MoeForwardArgs{}, num_tokens).total;
}

RoutingResult MoeLayer::routing_result(const MoeForwardArgs& args) const {
  MOEJIT_REQUIRE(args.workspace != 0, "moe: routing_result needs the forward's workspace");
  return carve(args, static_cast<int>(args.hidden.shape[0])).routing;
}

int MoeLayer::experts_touched(const MoeForwardArgs& args) {
  const RoutingResult r = routing_result(args);
  auto& api = runtime_.driver();
  MOEJIT_CHECK_CU(api, Launch, cuCtxSynchronize());
  std::vector<int> counts(spec_.local_experts());
  MOEJIT_CHECK_CU(api, Launch, cuMemcpyDtoH(counts.data(), reinterpret_cast<CUdeviceptr>(r.sort.expert_counts),
                                            counts.size() * sizeof(int)));
  return static_cast<int>(std::count_if(counts.begin(), counts.end(), [](int c) { return c > 0; }));
}

int MoeLayer::routing_error_flags(const MoeForwardArgs& args) {
  const int m = static_cast<int>(args.hidden.shape[0]);
  const Workspace w = carve(args, m);
  auto& api = runtime_.driver();
  MOEJIT_CHECK_CU(api, Launch, cuCtxSynchronize());
  int flags = 0;
  MOEJIT_CHECK_CU(api, Launch,
                  cuMemcpyDtoH(&flags, reinterpret_cast<CUdeviceptr>(w.routing.sort.error_flags), sizeof(int)));
  return flags;
}

}  // namespace moejit
