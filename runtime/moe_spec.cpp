#include "runtime/moe_spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <ranges>

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
  need(quant >= kQuantNone && quant <= kQuantMxfp4Packed, fmt::format("quant code {} is unknown", int(quant)));
  // Every stored row of a k tile must be whole 16-byte chunks: 32 elements at 4 bits, 16 at 8.
  auto divisible = [&](int unit, const std::string& why_unit) {
    need(hidden % unit == 0 && intermediate % unit == 0,
         fmt::format("quant {} needs hidden = {} and intermediate = {} to be multiples of {} ({})",
                     quant_name(quant), hidden, intermediate, unit, why_unit));
  };
  if (quant == kQuantInt4Group) {
    need(quant_group == 32 || quant_group == 64 || quant_group == 128 || quant_group == kQuantGroupPerRow,
         fmt::format("quant_group = {} must be 32, 64 or 128, or -1 (one scale per weight row)", quant_group));
    if (quant_group > 0) divisible(quant_group, "whole scale groups of 16-byte chunks");
    else divisible(32, "16-byte chunks of 4-bit elements");
  } else if (quant_is_mxfp4(quant)) {
    divisible(kMxfp4GroupSize, "one e8m0 scale per 32 elements");
  } else if (quant != kQuantNone) {
    divisible(16, "16-byte chunks of 8-bit elements");
  }
  need(!quant_zero_points || quant == kQuantInt4Group, "quant_zero_points applies to int4_group only");
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
  std::string q;
  if (quant != kQuantNone) {
    try {
      q = fmt::format(" {}", quant_name(quant));
    } catch (const Error&) {
      q = " quant?";
    }
    if (quant == kQuantInt4Group) q += fmt::format("/g{}{}", quant_group, quant_zero_points ? "+zp" : "");
  }
  return fmt::format("E={} top_k={} K={} N={} {} {}{}{}{}{}{}", num_experts, top_k, hidden, intermediate, act, dt, q,
                     has_bias ? " bias" : "", router_weight_on_input ? " weight-on-input" : "",
                     reduce == ReduceMode::Deterministic ? " deterministic" : "", fused ? "" : " unfused");
}

nlohmann::json MoeSpec::to_json() const {
  const char* logit = logit_dtype == LogitType::F32 ? "f32" : logit_dtype == LogitType::BF16 ? "bf16" : "f16";
  return {{"num_experts", num_experts},
          {"top_k", top_k},
          {"hidden", hidden},
          {"intermediate", intermediate},
          {"activation", activation_name(activation)},
          {"dtype", dtype_name(dtype)},
          {"scoring", scoring_name(scoring)},
          {"renormalize", renormalize},
          {"n_group", n_group},
          {"topk_group", topk_group},
          {"routed_scaling_factor", routed_scaling_factor},
          {"logit_dtype", logit},
          {"num_local_experts", num_local_experts},
          {"has_bias", has_bias},
          {"router_weight_on_input", router_weight_on_input},
          {"reduce", reduce == ReduceMode::Fast ? "fast" : "deterministic"},
          {"fused", fused},
          {"swiglu_alpha", swiglu_alpha},
          {"swiglu_limit", swiglu_limit},
          {"quant", quant_name(quant)},
          {"quant_group", quant_group},
          {"quant_zero_points", quant_zero_points}};
}

MoeSpec MoeSpec::from_json(const nlohmann::json& j) {
  MOEJIT_REQUIRE(j.is_object(), "MoE spec must be a JSON object");
  MoeSpec s;
  const nlohmann::json known = s.to_json();
  for (const auto& [key, value] : j.items())
    MOEJIT_REQUIRE(known.contains(key), "MoE spec: unknown field '{}' (fields: {})", key,
                   fmt::join(known.items() | std::views::transform([](const auto& kv) { return kv.key(); }), ", "));
  try {
    for (const char* required : {"num_experts", "top_k", "hidden", "intermediate"})
      MOEJIT_REQUIRE(j.contains(required), "MoE spec: field '{}' is required", required);
    s.num_experts = j.at("num_experts").get<int>();
    s.top_k = j.at("top_k").get<int>();
    s.hidden = j.at("hidden").get<int>();
    s.intermediate = j.at("intermediate").get<int>();
    if (j.contains("activation")) s.activation = static_cast<MoeActivation>(parse_activation(j["activation"].get<std::string>()));
    if (j.contains("dtype")) s.dtype = static_cast<MoeDType>(parse_dtype(j["dtype"].get<std::string>()));
    if (j.contains("scoring")) s.scoring = parse_scoring(j["scoring"].get<std::string>());
    s.renormalize = j.value("renormalize", s.renormalize);
    s.n_group = j.value("n_group", s.n_group);
    s.topk_group = j.value("topk_group", s.topk_group);
    s.routed_scaling_factor = j.value("routed_scaling_factor", s.routed_scaling_factor);
    if (j.contains("logit_dtype")) {
      const std::string t = j["logit_dtype"].get<std::string>();
      MOEJIT_REQUIRE(t == "f32" || t == "bf16" || t == "f16", "MoE spec: logit_dtype '{}' is not f32, bf16 or f16", t);
      s.logit_dtype = t == "f32" ? LogitType::F32 : t == "bf16" ? LogitType::BF16 : LogitType::F16;
    }
    s.num_local_experts = j.value("num_local_experts", s.num_local_experts);
    s.has_bias = j.value("has_bias", s.has_bias);
    s.router_weight_on_input = j.value("router_weight_on_input", s.router_weight_on_input);
    if (j.contains("reduce")) {
      const std::string r = j["reduce"].get<std::string>();
      MOEJIT_REQUIRE(r == "fast" || r == "deterministic", "MoE spec: reduce '{}' is not fast or deterministic", r);
      s.reduce = r == "fast" ? ReduceMode::Fast : ReduceMode::Deterministic;
    }
    s.fused = j.value("fused", s.fused);
    s.swiglu_alpha = j.value("swiglu_alpha", s.swiglu_alpha);
    s.swiglu_limit = j.value("swiglu_limit", s.swiglu_limit);
    if (j.contains("quant")) s.quant = static_cast<MoeQuant>(parse_quant(j["quant"].get<std::string>()));
    s.quant_group = j.value("quant_group", s.quant_group);
    s.quant_zero_points = j.value("quant_zero_points", s.quant_zero_points);
  } catch (const nlohmann::json::exception& e) {
    throw Error(Phase::Validate, fmt::format("MoE spec: {}", e.what()));
  }
  s.validate();
  return s;
}

}  // namespace moejit
