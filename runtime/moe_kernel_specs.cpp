// Which kernels a layer and a tile config need (no GPU: CI, `moejit compile`, the tuner's pruning and
// MoeLayer's prepare share these), and the rule that picks GEMM2's top-k sum.
#include <algorithm>

#include "common/error.h"
#include "jit/families.h"
#include "jit/moe_names.h"
#include "runtime/moe_layer.h"
#include "runtime/routing_sort_launcher.h"
#include "templates/moe/moe_gemm_args.cuh"
#include "templates/moe/moe_tile_walk.cuh"

namespace moejit {

namespace {
// GEMM2's fp32 top-k adds from which the fast mode stores DTYPE rows and sums them in a second kernel
// by default (TopkSum::Auto). H200, same-run A/B of the two sums on the tuned tiles: rows won
// 3-13% from ~64 MiB of adds on (DeepSeek-V3 TP8 M >= 512, Qwen3-30B-A3B M >= 1024, every layer at
// M = 8192), lost 2-6% on some buckets between (gpt-oss-120b, DeepSeek-V2-Lite at M = 4096): the
// tuner tries both per bucket (TopkSum).
constexpr long long kMoeRows16MinAddBytes = 64LL << 20;

// Scale granularity of the activations of a w8a8 layer (the moe_act_quant "mode").
const char* act_quant_mode(MoeQuant q) {
  return q == kQuantFp8Block ? "group128" : q == kQuantFp8Channel ? "row" : "static";
}
}  // namespace

RouterConfig moe_layer_router_config(const MoeSpec& spec) {
  spec.validate();
  RouterConfig c = spec.router_config();
  c.block_m = kMoeMaxBlockM;  // workspace capacity for every tile config
  c.min_block_m = kMoeMinBlockM;
  return c;
}

long long moe_gemm_shared_bytes(const KernelSpec& gemm, int block_m) {
  if (gemm.family.rfind("moe_gemm", 0) != 0) return 0;
  const bool pingpong = gemm.params.count("pingpong") != 0 && gemm.get_int("pingpong") != 0;  // wgmma only
  return gemm.get_int("smem_bytes") + (gemm.family == "moe_gemm_wgmma"
                                           ? moe_wgmma_static_smem_bytes(moe_wgmma_rows_held(block_m, pingpong))
                                           : moe_gemm_static_smem_bytes(block_m));
}

bool moe_gemm2_stores_rows16(const MoeSpec& spec, const MoeTileConfig& config, long long num_tokens) {
  if (config.gemv) return false;  // no GEMM2 kernel: gemv2 writes out itself
  const bool possible = spec.fused && spec.reduce == ReduceMode::Fast && config.gemm2.split_k <= 1;
  switch (config.topk_sum) {
    case TopkSum::Atomic:
      return false;
    case TopkSum::Rows:
      MOEJIT_REQUIRE(possible,
                     "moe: tile config {} sums the top k from DTYPE rows, which needs the fused layer in the fast "
                     "reduce mode and an unsplit GEMM2",
                     config.describe());
      return true;
    case TopkSum::Auto:
      break;
  }
  // A staged GEMM2 tile whose fp32 staging does not fit beside its ring (128 x 256 beside 3 slots)
  // runs only as DTYPE rows: Auto takes them at every batch size.
  const GemmTile& t = config.gemm2;
  if (possible && t.staged &&
      moe_wgmma_staging_bytes(kRoleGemm2Atomic, config.block_m, t.block_n, t.stages, false, true, spec.quant) == 0)
    return true;
  // The default: DTYPE rows from kMoeRows16MinAddBytes of fp32 adds on (monotone in num_tokens).
  return possible && num_tokens * spec.top_k * spec.hidden * 4 >= kMoeRows16MinAddBytes;
}

std::vector<bool> moe_gemm2_roles_upto(const MoeSpec& spec, const MoeTileConfig& config, int max_tokens) {
  std::vector<bool> roles;
  if (!moe_gemm2_stores_rows16(spec, config, 1)) roles.push_back(false);
  if (moe_gemm2_stores_rows16(spec, config, max_tokens)) roles.push_back(true);
  return roles;
}

KernelSpec moe_decode_spec(const MoeSpec& spec, const std::string& arch) {
  MOEJIT_REQUIRE(decode_gemv_supported(spec, arch),
                 "moe: the decode GEMV (tile config gemv) needs the fused layer in the fast reduce mode and 16-bit "
                 "weights with K, N multiples of 8 or fp8_block weights (sm_89+) with K, N multiples of 16 ({} on {})",
                 spec.describe(), arch);
  KernelSpec s = routing_topk_spec(moe_layer_router_config(spec), arch);  // the routing the layer runs
  s.family = "moe_decode_gemv";
  s.params.erase("warps");
  s.params.erase("experts_per_lane");
  s.params["dtype"] = std::string(dtype_name(spec.dtype));
  s.params["activation"] = std::string(activation_name(spec.activation));
  s.params["quant"] = std::string(quant_name(spec.quant));
  s.params["hidden"] = std::int64_t(spec.hidden);
  s.params["intermediate"] = std::int64_t(spec.intermediate);
  return complete_spec(std::move(s));
}

std::vector<KernelSpec> moe_expert_kernel_specs(const MoeSpec& spec, const MoeTileConfig& c, const std::string& arch,
                                                bool gemm2_rows16) {
  const std::string dtype = dtype_name(spec.dtype);
  auto act_quant = [&] {
    return complete_spec({"moe_act_quant", arch, {{"dtype", dtype}, {"mode", std::string(act_quant_mode(spec.quant))}}});
  };
  if (c.gemv) {
    MOEJIT_REQUIRE(!gemm2_rows16, "moe: the decode GEMV has no GEMM2 role (tile config {})", c.describe());
    // fp8_block: for the batches whose X the GEMV's CTAs would not quantize beside their routing
    // (moe_decode_quantize_overlaps), X is quantized once before gemv1.
    if (spec.quant == kQuantFp8Block) return {moe_decode_spec(spec, arch), act_quant()};
    return {moe_decode_spec(spec, arch)};
  }
  // One GEMM's spec: the parameters every moe_gemm family shares, then the family's own.
  auto gemm = [&](const char* role, int act, const GemmTile& t) {
    const bool gemm1 = std::string(role) == "gemm1";
    auto make = [&](const char* family, std::initializer_list<std::pair<const std::string, ParamValue>> own) {
      KernelSpec s{family,
                   arch,
                   {{"role", std::string(role)},
                    {"dtype", dtype},
                    {"activation", std::string(activation_name(act))},
                    {"quant", std::string(quant_name(spec.quant))},
                    {"block_m", std::int64_t(c.block_m)}}};
      s.params.insert(own);
      return complete_spec(std::move(s));
    };
    MOEJIT_REQUIRE(!t.persistent || t.wgmma, "moe: tile config {}: only wgmma tiles have a persistent variant",
                   c.describe());
    MOEJIT_REQUIRE(!t.staged || t.persistent, "moe: tile config {}: only persistent wgmma tiles have a staged epilogue",
                   c.describe());
    MOEJIT_REQUIRE(!t.pingpong || t.persistent, "moe: tile config {}: only persistent wgmma tiles have ping-pong groups",
                   c.describe());
    MOEJIT_REQUIRE(!t.multicast || (t.persistent && gemm1),
                   "moe: tile config {}: only a persistent wgmma GEMM1 multicasts its weight tiles", c.describe());
    MOEJIT_REQUIRE(!t.pregather || (t.persistent && gemm1),
                   "moe: tile config {}: only a persistent wgmma GEMM1 reads X gathered beforehand (pregather)",
                   c.describe());
    MOEJIT_REQUIRE(!t.pregather || spec.hidden * quant_activation_bytes(spec.quant) % 16 == 0,
                   "moe: tile config {}: pregather copies X's rows in 16-byte chunks; K = {} of {}-byte activations "
                   "is not a multiple of 16 bytes",
                   c.describe(), spec.hidden, quant_activation_bytes(spec.quant));
    MOEJIT_REQUIRE(t.work_queue >= -1 && t.work_queue <= 1,
                   "moe: tile config {}: {} work_queue = {} must be -1 (the rule), 0 or 1", c.describe(), role,
                   t.work_queue);
    MOEJIT_REQUIRE(t.work_queue < 0 || can_claim_work_items(t),
                   "moe: tile config {}: only a persistent wgmma tile without multicast, ping-pong groups or k splits "
                   "chooses its walk (work_queue)",
                   c.describe());
    MOEJIT_REQUIRE(t.walk_rows == 0 || t.wgmma,
                   "moe: tile config {}: only wgmma tiles walk their tiles in groups (walk_rows = {} on {})", c.describe(),
                   t.walk_rows, role);
    MOEJIT_REQUIRE(t.walk_rows >= 0 && t.walk_rows <= kMoeMaxWalkGroupRows,
                   "moe: tile config {}: {} walk_rows = {} must be in [0, {}] (0: the default, {})", c.describe(), role,
                   t.walk_rows, kMoeMaxWalkGroupRows, kMoeWalkGroupRows);
    MOEJIT_REQUIRE(!t.swap_ab_wgmma || t.swap_ab,
                   "moe: tile config {}: only a swap-AB tile runs the swap-AB kernel's wgmma variant (swap_ab_wgmma)",
                   c.describe());
    if (t.wgmma) {
      MOEJIT_REQUIRE(wgmma_supported(spec, arch),
                     "moe: tile config {} runs {} on the wgmma kernel, which needs sm_90a (not {}), 16-bit, fp8 "
                     "(fp8_block: gate / up rows stacked on 128-row block edges) or weight-only weights and the fast "
                     "reduce mode",
                     c.describe(), gemm1 ? "GEMM1" : "GEMM2", arch);
      MOEJIT_REQUIRE(!quant_dequantizes_b(spec.quant) || (t.persistent && !t.multicast && !t.pingpong),
                     "moe: tile config {}: {} weights on the wgmma kernel are dequantized by the persistent "
                     "variant's producer warpgroup (persistent, no multicast, no ping-pong)",
                     c.describe(), quant_name(spec.quant));
      MOEJIT_REQUIRE(t.block_k == 0 && t.warps_m == 0 && t.warps_n == 0,
                     "moe: tile config {}: a wgmma tile derives block_k and its warps (0 each)", c.describe());
      MOEJIT_REQUIRE(!gemm1 || t.split_k <= 1, "moe: tile config {}: the wgmma GEMM1 does not split k",
                     c.describe());
      return make("moe_gemm_wgmma", {{"block_n", std::int64_t(t.block_n)},
                                     {"stages", std::int64_t(t.stages)},
                                     {"persistent", std::int64_t(t.persistent ? 1 : 0)},
                                     {"staged_epilogue", std::int64_t(t.staged ? 1 : 0)},
                                     {"pingpong", std::int64_t(t.pingpong ? 1 : 0)},
                                     {"multicast", std::int64_t(t.multicast ? 1 : 0)}});
    }
    if (t.swap_ab) {
      MOEJIT_REQUIRE(swap_ab_supported(spec, gemm1),
                     "moe: tile config {} runs {} on the swap-AB kernel, which needs the fast reduce mode and a "
                     "reduction length of whole {}-weight chunks ({} here)",
                     c.describe(), gemm1 ? "GEMM1" : "GEMM2", moe_swap_ab_load_k(spec.quant),
                     gemm1 ? spec.hidden : spec.intermediate);
      MOEJIT_REQUIRE(t.block_n == 0 && t.block_k == 0 && t.warps_m == 0,
                     "moe: tile config {}: a swap-AB tile derives block_n, block_k and has no warps_m (0 each)",
                     c.describe());
      MOEJIT_REQUIRE(!gemm1 || t.split_k <= 1,
                     "moe: tile config {}: the swap-AB GEMM1 does not split k across CTAs (warps_k splits it within one)",
                     c.describe());
      MOEJIT_REQUIRE(!t.swap_ab_wgmma || swap_ab_wgmma_supported(spec, arch),
                     "moe: tile config {} runs {} on the swap-AB kernel's wgmma variant, which needs sm_90a (not {}) "
                     "and 16-bit activations (not {})",
                     c.describe(), gemm1 ? "GEMM1" : "GEMM2", arch, quant_name(spec.quant));
      return make("moe_gemm_swap_ab", {{"warps_n", std::int64_t(t.warps_n)},
                                       {"warps_k", std::int64_t(t.warps_k)},
                                       {"stages", std::int64_t(t.stages)},
                                       {"wgmma", std::int64_t(t.swap_ab_wgmma ? 1 : 0)}});
    }
    return make("moe_gemm", {{"block_n", std::int64_t(t.block_n)},
                             {"block_k", std::int64_t(t.block_k)},
                             {"warps_m", std::int64_t(t.warps_m)},
                             {"warps_n", std::int64_t(t.warps_n)},
                             {"stages", std::int64_t(t.stages)}});
  };
  const bool atomic = spec.fused && spec.reduce == ReduceMode::Fast;
  MOEJIT_REQUIRE(!gemm2_rows16 || (atomic && c.gemm2.split_k <= 1),
                 "moe: GEMM2's DTYPE rows need the fused fast mode and an unsplit GEMM2 (tile config {})", c.describe());
  // Order matters: MoeLayer::kernels_for indexes these.
  std::vector<KernelSpec> specs = {
      gemm("gemm1", spec.fused ? spec.activation : kActNone, c.gemm1),
      gemm(!atomic ? "gemm2_rows" : gemm2_rows16 ? "gemm2_rows16" : "gemm2_atomic", kActNone, c.gemm2),
      complete_spec({"moe_reduce", arch, {{"dtype", dtype}, {"top_k", std::int64_t(spec.top_k)}}}),
  };
  if (!spec.fused)
    specs.push_back(complete_spec(
        {"moe_activation", arch, {{"dtype", dtype}, {"activation", std::string(activation_name(spec.activation))}}}));
  if (quant_is_fp8(spec.quant)) specs.push_back(act_quant());
  return specs;
}

std::vector<KernelSpec> moe_layer_kernel_specs(const MoeSpec& spec, int max_tokens, const std::string& arch) {
  const RouterConfig router = moe_layer_router_config(spec);
  std::vector<KernelSpec> out = {
      routing_fused_spec(router, arch),
      RoutingSorter::spec_for({.num_experts = router.num_experts, .top_k = router.top_k}, arch)};
  if (decode_gemv_supported(spec, arch)) out.push_back(moe_decode_spec(spec, arch));  // any bucket may pick it
  for (const auto& config : heuristic_tile_configs(spec, max_tokens, arch))
    for (bool rows16 : moe_gemm2_roles_upto(spec, config, max_tokens))
      for (auto& s : moe_expert_kernel_specs(spec, config, arch, rows16))
        if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(std::move(s));
  return out;
}

}  // namespace moejit
