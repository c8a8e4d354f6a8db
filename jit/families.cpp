#include "jit/families.h"

#include <algorithm>

#include "common/error.h"
#include "common/options.h"
#include "jit/family_builders.h"

namespace moejit {

std::int64_t next_pow2(std::int64_t x) {
  std::int64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

ParamDesc int_param(std::string name, std::string tname, std::string doc, std::optional<std::int64_t> def,
                    std::int64_t min, std::int64_t max) {
  ParamDesc p;
  p.name = std::move(name);
  p.template_name = std::move(tname);
  p.kind = ParamKind::Int;
  p.doc = std::move(doc);
  if (def) p.default_value = *def;
  p.min = min;
  p.max = max;
  return p;
}

ParamDesc derived_int(std::string name, std::string tname, std::string doc) {
  ParamDesc p = int_param(std::move(name), std::move(tname), std::move(doc), std::nullopt, 0, 0);
  p.derived = true;
  return p;
}

ParamDesc enum_param(std::string name, std::string tname, std::string doc, std::string def,
                     std::map<std::string, std::string> values) {
  ParamDesc p;
  p.name = std::move(name);
  p.template_name = std::move(tname);
  p.kind = ParamKind::Enum;
  p.doc = std::move(doc);
  p.default_value = std::move(def);
  for (const auto& [value, cpp] : values) p.choices.push_back(value);
  p.enum_cpp = std::move(values);
  return p;
}

ParamDesc bool_param(std::string name, std::string tname, std::string doc, bool def) {
  ParamDesc p;
  p.name = std::move(name);
  p.template_name = std::move(tname);
  p.kind = ParamKind::Bool;
  p.doc = std::move(doc);
  p.default_value = def;
  return p;
}

// Checks shared by the families that select experts (routing_topk, routing_fused,
// moe_decode_gemv); sets experts_per_lane.
void derive_topk_selection(KernelSpec& s, const char* family_name) {
  const std::int64_t e = s.get_int("num_experts"), k = s.get_int("top_k");
  const std::int64_t groups = s.get_int("n_group"), kept = s.get_int("topk_group");
  if (k > e) throw Error(Phase::Validate, fmt::format("{}: top_k = {} exceeds num_experts = {}", family_name, k, e));
  if (e % groups != 0)
    throw Error(Phase::Validate,
                fmt::format("{}: num_experts = {} is not divisible by n_group = {}", family_name, e, groups));
  if (kept > groups)
    throw Error(Phase::Validate, fmt::format("{}: topk_group = {} exceeds n_group = {}", family_name, kept, groups));
  if (k > kept * (e / groups))
    throw Error(Phase::Validate, fmt::format("{}: top_k = {} exceeds the {} experts of the {} kept groups",
                                             family_name, k, kept * (e / groups), kept));
  if (groups > 1 && s.get_string("scoring") == "softmax_after_topk")
    throw Error(Phase::Validate, fmt::format("{}: grouped top-k needs softmax or sigmoid scoring", family_name));
  s.params["experts_per_lane"] = (e + 31) / 32;
}

// routing_topk: one warp per token, experts spread over the 32 lanes.
FamilyInfo routing_topk_family() {
  FamilyInfo f;
  f.name = "routing_topk";
  f.header = "routing/routing_topk.cuh";
  f.doc = "router logits -> top-k expert ids and weights (softmax, sigmoid, grouped, biased)";
  f.params = {
      int_param("top_k", "TOPK", "experts per token", std::nullopt, 1, 32),
      int_param("num_experts", "NUM_EXPERTS", "experts E (logits per token)", std::nullopt, 1, 1024),
      derived_int("experts_per_lane", "EXPERTS_PER_LANE", "ceil(num_experts / 32)"),
      enum_param("scoring", "SCORING", "how logits become scores", "softmax",
                 {{"softmax", "moejit::kScoringSoftmax"},
                  {"sigmoid", "moejit::kScoringSigmoid"},
                  {"softmax_after_topk", "moejit::kScoringSoftmaxAfterTopk"}}),
      bool_param("renormalize", "RENORMALIZE", "divide the selected weights by their sum", true),
      int_param("n_group", "N_GROUP", "expert groups (grouped top-k); 1 = off", 1, 1, 64),
      int_param("topk_group", "TOPK_GROUP", "groups kept", 1, 1, 64),
      enum_param("logit_dtype", "LOGIT_DTYPE", "router logits element type", "bf16",
                 {{"f32", "moejit::kLogitF32"}, {"bf16", "moejit::kLogitBF16"}, {"f16", "moejit::kLogitF16"}}),
      derived_int("warps", "WARPS", "warps (tokens) per CTA"),
  };
  f.entries = {{"topk", "moejit::routing_topk_kernel", "moejit::RoutingTopkArgs"}};
  f.derive = [](KernelSpec& s) {
    derive_topk_selection(s, "routing_topk");
    s.params["warps"] = std::int64_t(4);
  };
  return f;
}

namespace {

// routing_fused: the whole routing of up to `tokens` tokens in one CTA and one launch.
FamilyInfo routing_fused_family() {
  FamilyInfo f = routing_topk_family();
  f.name = "routing_fused";
  f.header = "routing/routing_fused.cuh";
  f.doc = "top-k fused with the routing metadata: one CTA for small batches (route), or top-k + count per CTA (topk_rank)";
  f.params.pop_back();  // no "warps": the CTA is 512 threads
  f.params.push_back(int_param("tokens", "TOKENS", "most tokens one launch handles", 32, 1, 256));
  f.params.push_back(derived_int("padded", "PADDED", "key block width = next_pow2(tokens * top_k)"));
  f.entries = {{"route", "moejit::routing_fused_kernel", "moejit::RoutingFusedArgs"},
               {"topk_rank", "moejit::routing_topk_rank_kernel", "moejit::RoutingFusedArgs"}};
  f.derive = [](KernelSpec& s) {
    derive_topk_selection(s, "routing_fused");
    const std::int64_t keys = s.get_int("tokens") * s.get_int("top_k");
    if (keys > 1024)
      throw Error(Phase::Validate, fmt::format("routing_fused: tokens * top_k = {} exceeds 1024 keys per CTA", keys));
    if (s.get_int("num_experts") > 1024)
      throw Error(Phase::Validate, "routing_fused: more than 1024 experts");
    s.params["padded"] = next_pow2(keys);
  };
  return f;
}

// routing_sort: keys per CTA = tokens_per_cta * top_k; key block width = next power of two. Ranks
// and chunk counts are 16-bit and the chunk table is [padded / 32][E_local]: at most 1024 keys.
constexpr std::int64_t kMaxRoutingKeysPerCta = 1024;

FamilyInfo routing_sort_family() {
  FamilyInfo f;
  f.name = "routing_sort";
  f.header = "routing/routing_sort.cuh";
  f.doc = "routing metadata: expert counts, offsets, gather/scatter index, tile map";
  f.params = {
      int_param("top_k", "TOPK", "experts per token", std::nullopt, 1, 32),
      int_param("tokens_per_cta", "TOKENS_PER_CTA", "tokens whose keys one CTA sorts", 32, 1, 4096),
      derived_int("padded", "PADDED", "key block width = next_pow2(tokens_per_cta * top_k)"),
      derived_int("threads", "THREADS", "threads per CTA of the count and scatter kernels"),
  };
  f.entries = {
      {"count", "moejit::routing_count_kernel", "moejit::RoutingSortArgs"},
      {"scan", "moejit::routing_scan_kernel", "moejit::RoutingSortArgs"},
      {"scatter", "moejit::routing_scatter_kernel", "moejit::RoutingSortArgs"},
  };
  f.derive = [](KernelSpec& s) {
    const std::int64_t block = s.get_int("tokens_per_cta") * s.get_int("top_k");
    if (block > kMaxRoutingKeysPerCta)
      throw Error(Phase::Validate,
                  fmt::format("routing_sort: tokens_per_cta * top_k = {} exceeds {} keys per CTA", block,
                              kMaxRoutingKeysPerCta));
    const std::int64_t padded = next_pow2(block);
    s.params["padded"] = padded;
    // Half as many threads as keys: each warp ranks two chunks of 32 keys.
    s.params["threads"] = std::clamp<std::int64_t>(padded / 2, 32, 512);
  };
  return f;
}

ParamValue parse_value(const FamilyInfo& f, const ParamDesc& p, const std::string& text) {
  const std::string what = fmt::format("{}: parameter {}", f.name, p.name);
  switch (p.kind) {
    case ParamKind::Int: return parse_int(text, what);
    case ParamKind::Bool: return parse_bool(text, what);
    case ParamKind::Enum: return text;
  }
  return text;
}

void check_value(const FamilyInfo& f, const ParamDesc& p, const ParamValue& v) {
  switch (p.kind) {
    case ParamKind::Int: {
      if (!std::holds_alternative<std::int64_t>(v))
        throw Error(Phase::Validate, fmt::format("{}: parameter {} must be an integer", f.name, p.name));
      auto x = std::get<std::int64_t>(v);
      if (x < p.min || x > p.max)
        throw Error(Phase::Validate, fmt::format("{}: {}={} is out of range [{}, {}] ({})", f.name, p.name, x,
                                                 p.min, p.max, p.doc));
      break;
    }
    case ParamKind::Bool:
      if (!std::holds_alternative<bool>(v))
        throw Error(Phase::Validate, fmt::format("{}: parameter {} must be a boolean", f.name, p.name));
      break;
    case ParamKind::Enum: {
      const auto* s = std::get_if<std::string>(&v);
      if (s == nullptr || std::find(p.choices.begin(), p.choices.end(), *s) == p.choices.end())
        throw Error(Phase::Validate, fmt::format("{}: parameter {} must be one of: {}", f.name, p.name,
                                                 fmt::join(p.choices, ", ")));
      break;
    }
  }
}

}  // namespace

const std::vector<FamilyInfo>& families() {
  static const std::vector<FamilyInfo> kFamilies = {routing_topk_family(), routing_fused_family(), routing_sort_family(),
                                                     moe_gemm_family(), moe_gemm_swap_ab_family(), moe_gemm_wgmma_family(),
                                                     moe_activation_family(), moe_reduce_family(), moe_act_quant_family(), moe_decode_gemv_family(),
                                                     fill_random_family()};
  return kFamilies;
}

const FamilyInfo& family(const std::string& name) {
  for (const auto& f : families())
    if (f.name == name) return f;
  std::vector<std::string> names;
  for (const auto& f : families()) names.push_back(f.name);
  throw Error(Phase::Validate, fmt::format("unknown kernel family '{}' (known: {})", name, fmt::join(names, ", ")));
}

KernelSpec complete_spec(KernelSpec spec) {
  const FamilyInfo& f = family(spec.family);
  validate_arch(spec.arch);
  for (const auto& [name, value] : spec.params) {
    auto it = std::find_if(f.params.begin(), f.params.end(), [&](const ParamDesc& p) { return p.name == name; });
    if (it == f.params.end()) {
      std::vector<std::string> names;
      for (const auto& p : f.params)
        if (!p.derived) names.push_back(p.name);
      throw Error(Phase::Validate, fmt::format("{}: unknown parameter '{}' (parameters: {})", f.name, name,
                                               fmt::join(names, ", ")));
    }
  }
  // Derived parameters are recomputed, never trusted from input; a stale value in a spec file is
  // an error, not silently replaced.
  KernelSpec given = spec;
  for (const auto& p : f.params) {
    if (p.derived) {
      spec.params.erase(p.name);
      continue;
    }
    if (!spec.params.count(p.name)) {
      if (!p.default_value)
        throw Error(Phase::Validate, fmt::format("{}: parameter '{}' is required ({})", f.name, p.name, p.doc));
      spec.params[p.name] = *p.default_value;
    }
    check_value(f, p, spec.params[p.name]);
  }
  if (f.derive) f.derive(spec);
  for (const auto& p : f.params) {
    if (!p.derived || !given.params.count(p.name)) continue;
    if (given.params.at(p.name) != spec.params.at(p.name))
      throw Error(Phase::Validate, fmt::format("{}: derived parameter {}={} does not match the computed value {}",
                                               f.name, p.name, param_to_string(given.params.at(p.name)),
                                               param_to_string(spec.params.at(p.name))));
  }
  return spec;
}

KernelSpec make_spec(const std::string& family_name, const std::string& arch,
                     const std::map<std::string, std::string>& raw_params) {
  const FamilyInfo& f = family(family_name);
  KernelSpec spec{family_name, arch, {}};
  for (const auto& [name, text] : raw_params) {
    auto it = std::find_if(f.params.begin(), f.params.end(), [&](const ParamDesc& p) { return p.name == name; });
    spec.params[name] = it == f.params.end() ? ParamValue(text) : parse_value(f, *it, text);
  }
  return complete_spec(std::move(spec));
}

}  // namespace moejit
