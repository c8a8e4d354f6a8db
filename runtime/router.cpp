#include "runtime/router.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "jit/families.h"
#include "runtime/runtime.h"
#include "templates/routing/routing_topk_args.cuh"

namespace moejit {

const char* scoring_name(Scoring s) {
  switch (s) {
    case Scoring::Softmax: return "softmax";
    case Scoring::Sigmoid: return "sigmoid";
    case Scoring::SoftmaxAfterTopk: return "softmax_after_topk";
  }
  return "?";
}

Scoring parse_scoring(const std::string& name) {
  if (name == "softmax") return Scoring::Softmax;
  if (name == "sigmoid") return Scoring::Sigmoid;
  if (name == "softmax_after_topk") return Scoring::SoftmaxAfterTopk;
  throw Error(Phase::Validate, fmt::format("unknown scoring '{}' (softmax, sigmoid, softmax_after_topk)", name));
}

namespace {
const char* logit_name(LogitType t) {
  switch (t) {
    case LogitType::F32: return "f32";
    case LogitType::BF16: return "bf16";
    case LogitType::F16: return "f16";
  }
  return "?";
}
std::size_t align256(std::size_t x) { return (x + 255) / 256 * 256; }
}  // namespace

Router::Router(Runtime& runtime, RouterConfig c)
    : runtime_(runtime),
      config_(c),
      sorter_(runtime, {.num_experts = c.num_experts, .top_k = c.top_k, .block_m = c.block_m,
                        .num_local_experts = c.num_local_experts, .min_block_m = c.min_block_m}) {
  MOEJIT_REQUIRE(std::isfinite(c.routed_scaling_factor), "routing: routed_scaling_factor must be finite");
  topk_spec("sm_80");  // validates grouping, top_k against the selectable experts, ...
  fused_padded_ = static_cast<int>(fused_spec("sm_80").get_int("padded"));
  MOEJIT_REQUIRE(sorter_.config().tokens_per_cta == kRouterFusedTokens,
                 "routing: the sorter's tokens_per_cta ({}) must match the fused kernels' ({})",
                 sorter_.config().tokens_per_cta, kRouterFusedTokens);
}

KernelSpec routing_topk_spec(const RouterConfig& c, const std::string& arch) {
  return complete_spec({"routing_topk", arch,
                        {{"top_k", std::int64_t(c.top_k)},
                         {"num_experts", std::int64_t(c.num_experts)},
                         {"scoring", std::string(scoring_name(c.scoring))},
                         {"renormalize", c.renormalize},
                         {"n_group", std::int64_t(c.n_group)},
                         {"topk_group", std::int64_t(c.topk_group)},
                         {"logit_dtype", std::string(logit_name(c.logit_type))}}});
}

KernelSpec routing_fused_spec(const RouterConfig& c, const std::string& arch) {
  KernelSpec s = routing_topk_spec(c, arch);
  s.family = "routing_fused";
  s.params.erase("warps");
  s.params.erase("experts_per_lane");
  s.params["tokens"] = std::int64_t(kRouterFusedTokens);
  return complete_spec(std::move(s));
}

KernelSpec Router::topk_spec(const std::string& arch) const { return routing_topk_spec(config_, arch); }
KernelSpec Router::fused_spec(const std::string& arch) const { return routing_fused_spec(config_, arch); }

std::size_t Router::workspace_bytes(int max_tokens) const {
  const std::size_t slots = std::size_t(std::max(max_tokens, 0)) * config_.top_k;
  return 2 * align256(std::max<std::size_t>(slots, 1) * 4) + sorter_.workspace_bytes(max_tokens);
}

RoutingResult Router::carve(CUdeviceptr workspace, int max_tokens) const {
  MOEJIT_REQUIRE(workspace != 0 && workspace % 256 == 0, "routing: workspace must be non-null and 256-byte aligned");
  const std::size_t slot_bytes = align256(std::max<std::size_t>(std::size_t(std::max(max_tokens, 0)) * config_.top_k, 1) * 4);
  RoutingResult r;
  r.topk_ids = reinterpret_cast<int*>(workspace);
  r.topk_weights = reinterpret_cast<float*>(workspace + slot_bytes);
  r.sort = sorter_.carve(workspace + 2 * slot_bytes, max_tokens);
  return r;
}

void Router::prepare() {
  if (!fused_module_) fused_module_ = runtime_.load(fused_spec(runtime_.device_arch()));
  sorter_.prepare();
}

bool Router::one_launch(int num_tokens) const {
  return num_tokens > 0 && num_tokens <= kRouterFusedTokens &&
         sorter_.config().num_local_experts <= kRouterFusedMaxLocalExperts;
}

bool Router::zeroes_for(int num_tokens, std::size_t zero_bytes) const {
  return one_launch(num_tokens) && zero_bytes <= kRouterZeroMaxBytes && zero_bytes % 16 == 0;
}

void Router::route(CUstream stream, CUdeviceptr logits, long long row_stride, CUdeviceptr correction_bias,
                   CUdeviceptr expert_map, int num_tokens, int max_tokens, const RoutingResult& out, int block_m,
                   CUdeviceptr zero, std::size_t zero_bytes, bool beside_previous) {
  const std::size_t elem = config_.logit_type == LogitType::F32 ? 4 : 2;
  MOEJIT_REQUIRE(num_tokens >= 0 && num_tokens <= max_tokens, "routing: num_tokens = {} must be in [0, {}]",
                 num_tokens, max_tokens);
  MOEJIT_REQUIRE(num_tokens == 0 || logits != 0, "routing: logits is null");
  MOEJIT_REQUIRE(logits % elem == 0, "routing: logits must be {}-byte aligned", elem);
  MOEJIT_REQUIRE(row_stride >= config_.num_experts, "routing: row_stride = {} is smaller than num_experts = {}",
                 row_stride, config_.num_experts);
  MOEJIT_REQUIRE(correction_bias % 4 == 0, "routing: correction_bias must be 4-byte aligned");
  MOEJIT_REQUIRE(out.topk_ids != nullptr && out.topk_weights != nullptr, "routing: result was not carved");
  MOEJIT_REQUIRE(zero_bytes == 0 || (zeroes_for(num_tokens, zero_bytes) && zero != 0 && zero % 16 == 0),
                 "routing: cannot zero {} bytes for {} tokens (one launch, at most {} bytes, 16-byte aligned words)",
                 zero_bytes, num_tokens, kRouterZeroMaxBytes);
  prepare();
  RoutingFusedArgs f{};
  f.topk.logits = reinterpret_cast<const void*>(logits);
  f.topk.row_stride = row_stride;
  f.topk.correction_bias = reinterpret_cast<const float*>(correction_bias);
  f.topk.num_tokens = num_tokens;
  f.topk.num_experts = config_.num_experts;
  f.topk.routed_scaling_factor = config_.routed_scaling_factor;
  f.topk.topk_ids = out.topk_ids;
  f.topk.topk_weights = out.topk_weights;
  f.sort = sorter_.make_args(reinterpret_cast<CUdeviceptr>(out.topk_ids), expert_map, num_tokens, max_tokens, out.sort,
                             block_m);
  const int local_experts = sorter_.config().num_local_experts;  // resolved: never -1
  constexpr unsigned kThreads = kRoutingFusedThreads;
  const int padded = fused_padded_;
  if (one_launch(num_tokens)) {
    f.sort.num_ctas = 1;
    f.zero = reinterpret_cast<void*>(zero);
    f.zero_vec4 = static_cast<long long>(zero_bytes / 16);
    fused_module_->kernel("route").launch(
        stream, {1, 1, 1, kThreads, 1, 1, routing_fused_smem_bytes(padded, local_experts), beside_previous}, f);
    return;
  }
  // top-k + count per CTA of kRouterFusedTokens tokens (the sorter's tokens_per_cta), then the
  // sorter's scan and scatter.
  if (f.sort.num_ctas > 0)
    fused_module_->kernel("topk_rank").launch(
        stream,
        {unsigned(f.sort.num_ctas), 1, 1, kThreads, 1, 1, routing_rank_smem_bytes(padded, local_experts), beside_previous},
        f);
  sorter_.finish(stream, f.sort);
}

TopkReference reference_routing_topk(const std::vector<double>& logits, int num_tokens, const RouterConfig& c,
                                     const std::vector<double>& bias) {
  const int E = c.num_experts, K = c.top_k;
  TopkReference r;
  r.ids.resize(std::size_t(num_tokens) * K);
  r.weights.resize(std::size_t(num_tokens) * K);
  r.select.resize(std::size_t(num_tokens) * E);
  for (int t = 0; t < num_tokens; ++t) {
    const double* x = &logits[std::size_t(t) * E];
    std::vector<double> score(x, x + E);
    if (c.scoring == Scoring::Softmax) {
      const double m = *std::max_element(score.begin(), score.end());
      double sum = 0;
      for (double& s : score) sum += (s = std::exp(s - m));
      for (double& s : score) s /= sum;
    } else if (c.scoring == Scoring::Sigmoid) {
      for (double& s : score) s = 1.0 / (1.0 + std::exp(-s));
    }
    std::vector<double> sel(E);
    for (int e = 0; e < E; ++e) sel[e] = score[e] + (bias.empty() ? 0.0 : bias[e]);
    std::copy(sel.begin(), sel.end(), r.select.begin() + std::size_t(t) * E);
    std::vector<bool> allowed(E, true);
    if (c.n_group > 1) {
      const int g_size = E / c.n_group;
      std::vector<double> gscore(c.n_group);
      for (int g = 0; g < c.n_group; ++g) {
        std::vector<double> v(sel.begin() + g * g_size, sel.begin() + (g + 1) * g_size);
        std::sort(v.rbegin(), v.rend());
        gscore[g] = (!bias.empty() && g_size > 1) ? v[0] + v[1] : v[0];
      }
      std::vector<int> order(c.n_group);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return gscore[a] > gscore[b]; });
      std::vector<bool> keep(c.n_group, false);
      for (int i = 0; i < c.topk_group; ++i) keep[order[i]] = true;
      for (int e = 0; e < E; ++e) allowed[e] = keep[e / g_size];
    }
    std::vector<int> order;
    for (int e = 0; e < E; ++e)
      if (allowed[e]) order.push_back(e);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return sel[a] > sel[b]; });  // ties: lower id
    double sum = 0;
    for (int k = 0; k < K; ++k) sum += score[order[k]];
    double m = score[order[0]];
    double exp_sum = 0;
    for (int k = 0; k < K; ++k) exp_sum += std::exp(score[order[k]] - m);
    for (int k = 0; k < K; ++k) {
      double w = score[order[k]];
      if (c.scoring == Scoring::SoftmaxAfterTopk) w = std::exp(w - m) / exp_sum;
      else if (c.renormalize) w /= sum;
      r.ids[std::size_t(t) * K + k] = order[k];
      r.weights[std::size_t(t) * K + k] = w * c.routed_scaling_factor;
    }
  }
  return r;
}

}  // namespace moejit
