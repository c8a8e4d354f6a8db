#include "runtime/moe_spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "common/error.h"
#include "jit/moe_names.h"

namespace moejit {

RouterConfig MoeSpec::router_config() const {
  RouterConfig c;
  c.num_experts = num_experts;
  c.top_k = top_k;
  c.scoring = scoring;
  c.renormalize = renormalize;
  c.n_group = n_group;
  c.topk_group = topk_group;
  c.routed_scaling_factor = routed_scaling_factor;
  c.logit_type = logit_dtype;
  c.num_local_experts = num_local_experts;
  return c;
}

std::vector<std::string> MoeSpec::unsupported() const {
  std::vector<std::string> why;
  auto need = [&](bool ok, std::string text) {
    if (!ok) why.push_back(std::move(text));
  };
  need(num_experts >= 1 && num_experts <= 1024, fmt::format("num_experts = {} must be in [1, 1024]", num_experts));
  need(top_k >= 1 && top_k <= 32, fmt::format("top_k = {} must be in [1, 32]", top_k));
  need(top_k <= num_experts, fmt::format("top_k = {} exceeds num_experts = {}", top_k, num_experts));
  need(hidden >= 8 && hidden % 8 == 0,
       fmt::format("hidden = {} must be a positive multiple of 8 (16-byte rows for cp.async)", hidden));
  need(intermediate >= 8 && intermediate % 8 == 0,
       fmt::format("intermediate = {} must be a positive multiple of 8 (16-byte rows for cp.async)", intermediate));
  need(activation != kActNone && activation >= kActSiluMul && activation <= kActRelu2,
       fmt::format("activation code {} is not a layer activation", int(activation)));
  need(dtype == kDTypeBF16 || dtype == kDTypeF16, fmt::format("dtype code {} is not bf16 or f16", int(dtype)));
  need(num_local_experts == -1 || (num_local_experts >= 1 && num_local_experts <= num_experts),
       fmt::format("num_local_experts = {} must be -1 or in [1, num_experts = {}]", num_local_experts, num_experts));
  need(std::isfinite(swiglu_alpha) && std::isfinite(swiglu_limit) && swiglu_limit > 0,
       "swiglu_alpha and swiglu_limit must be finite, the limit positive");
  need(std::isfinite(routed_scaling_factor), "routed_scaling_factor must be finite");
  return why;
}

void MoeSpec::validate() const {
  const auto why = unsupported();
  if (!why.empty())
    throw Error(Phase::Validate, fmt::format("unsupported MoE layer ({}): {}", describe(), fmt::join(why, "; ")));
}

std::string MoeSpec::describe() const {
  std::string act = "?", dt = "?";
  try {
    act = activation_name(activation);
    dt = dtype_name(dtype);
  } catch (const Error&) {
  }
  return fmt::format("E={} top_k={} K={} N={} {} {}{}{}{}{}", num_experts, top_k, hidden, intermediate, act, dt,
                     has_bias ? " bias" : "", router_weight_on_input ? " weight-on-input" : "",
                     reduce == ReduceMode::Deterministic ? " deterministic" : "", fused ? "" : " unfused");
}

}  // namespace moejit
