#include "runtime/model_config.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "common/files.h"
#include "jit/families.h"
#include "jit/moe_names.h"
#include "runtime/json_fields.h"
#include "runtime/model_quant_config.h"
#include "runtime/moe_layer.h"

namespace moejit {

namespace {
constexpr const char* kWhat = "model config";
template <typename T>
std::optional<T> optional_field(const nlohmann::json& j, std::initializer_list<const char*> names) {
  return typed_field<T>(j, names, kWhat);
}

// A positive integer, or a per-layer list of them (Hunyuan's num_experts, moe_topk,
// moe_intermediate_size) whose entries agree: this describes one MoE layer, so layers that differ
// are an error naming the field (each layer then needs a MoeSpec of its own).
int required_int(const nlohmann::json& j, std::initializer_list<const char*> names) {
  const char* name = nullptr;
  const nlohmann::json* v = first_present(j, names, &name);
  if (v == nullptr)
    throw Error(Phase::Validate, fmt::format("model config has none of: {}", fmt::join(names, ", ")));
  auto positive = [](const nlohmann::json& x) {
    return x.is_number_integer() && x.get<long long>() > 0 && x.get<long long>() <= std::numeric_limits<int>::max();
  };
  if (v->is_array() && !v->empty() && std::all_of(v->begin(), v->end(), positive)) {
    if (std::any_of(v->begin(), v->end(), [&](const nlohmann::json& x) { return x != v->front(); }))
      throw Error(Phase::Validate, fmt::format("model config field {} = {} differs between layers; describe each "
                                               "layer with a MoeSpec of its own",
                                               name, v->dump()));
    return v->front().get<int>();
  }
  if (!positive(*v))
    throw Error(Phase::Validate,
                fmt::format("model config field {} = {} must be a positive integer (or a list of equal ones, "
                            "one per layer)",
                            name, v->dump()));
  return v->get<int>();
}
// Hugging Face activation spellings: the layer activation of a gated expert (x W_gate, x W_up) and
// of a single-input one (x W_up); null where the function has no such form.
struct HfActivation {
  const char* hf;
  const char* gated;
  const char* single;
};
constexpr HfActivation kHfActivations[] = {
    {"silu", "silu_mul", "silu"},
    {"swish", "silu_mul", "silu"},
    {"swiglu", "silu_mul", nullptr},
    {"gelu", "gelu_mul", "gelu"},
    {"gelu_pytorch_tanh", "gelu_tanh_mul", "gelu_tanh"},
    {"gelu_new", "gelu_tanh_mul", "gelu_tanh"},
    {"gelu_fast", "gelu_tanh_mul", "gelu_tanh"},
    {"relu2", "relu2", "relu2"},  // one input either way
    {"relu_squared", "relu2", "relu2"},
};
// hidden_act names the gate's function; MoE experts are gated unless the model says otherwise, so
// "silu" means silu_mul here. Other names: our own spellings, else a clear error.
std::string expert_activation(const std::string& hidden_act) {
  for (const auto& a : kHfActivations)
    if (hidden_act == a.hf) return a.gated;
  return activation_name(parse_activation(hidden_act));
}
// Single-input experts (Nemotron-H's mlp_hidden_act: up, act, down).
std::string single_input_activation(const std::string& act) {
  const char* single = nullptr;  // swiglu, silu_mul, none, ...: refused
  bool known = false;
  for (const auto& a : kHfActivations)
    if (act == a.hf) {
      single = a.single;
      known = true;
    }
  if (!known) {  // our own spellings; else a clear error
    const int code = parse_activation(act);
    if (!activation_is_gated(code) && code != kActNone) single = activation_name(code);
  }
  if (single == nullptr)
    throw Error(Phase::Validate, fmt::format("model config: mlp_hidden_act '{}' is not a single-input activation "
                                             "(Nemotron-H experts take one input: relu2, silu, gelu, gelu_tanh)",
                                             act));
  return single;
}
// DBRX keeps its experts under ffn_config (moe_num_experts, moe_top_k, ffn_hidden_size, ffn_act_fn)
// and the width as d_model: the same fields under the names the other configs use. Its router
// divides the top-k weights by their L1 norm (moe_normalize_expert_weights = 1: a renormalization);
// another norm is an error.
nlohmann::json dbrx_as_common(const nlohmann::json& root) {
  const nlohmann::json& ffn = root["ffn_config"];
  nlohmann::json flat = root;
  flat.erase("ffn_config");
  auto copy = [&](const char* from, const char* to) {
    if (ffn.contains(from)) flat[to] = ffn[from];
  };
  copy("moe_num_experts", "num_local_experts");
  copy("moe_top_k", "num_experts_per_tok");
  copy("ffn_hidden_size", "intermediate_size");
  if (root.contains("d_model")) flat["hidden_size"] = root["d_model"];
  flat["hidden_act"] = "silu";
  if (ffn.contains("ffn_act_fn") && ffn["ffn_act_fn"].is_object() && ffn["ffn_act_fn"].contains("name"))
    flat["hidden_act"] = ffn["ffn_act_fn"]["name"];
  const nlohmann::json norm = ffn.value("moe_normalize_expert_weights", nlohmann::json(1));
  if (norm.is_null()) {
    flat["norm_topk_prob"] = false;
  } else if (norm.is_number() && norm.get<double>() == 1.0) {
    flat["norm_topk_prob"] = true;
  } else {
    throw Error(Phase::Validate, fmt::format("model config: dbrx moe_normalize_expert_weights = {} (only 1, the L1 "
                                             "renormalization, or null)", norm.dump()));
  }
  return flat;
}
// Routing fields a config leaves out take its Hugging Face config class's default, as the model's
// code (and vLLM, which builds its layers from that class) runs them: the classes below default
// norm_topk_prob to False (Qwen2MoeConfig, Qwen3MoeConfig, OlmoeConfig, DeepseekV2Config,
// Dots1Config; Jamba keeps its top-k softmax weights as they are); DeepseekV3Config defaults to
// grouped top-k (n_group 8, topk_group 4) scaled by 2.5. Other model types: renormalized, one
// group, scale 1 (Mixtral's router).
struct UnstatedRouting {
  const char* model_type;
  bool renormalize;
  int n_group, topk_group;
  double routed_scaling_factor;
};
constexpr UnstatedRouting kUnstatedRouting[] = {
    {"qwen2_moe", false, 1, 1, 1.0}, {"qwen3_moe", false, 1, 1, 1.0}, {"olmoe", false, 1, 1, 1.0},
    {"deepseek_v2", false, 1, 1, 1.0}, {"dots1", false, 1, 1, 1.0}, {"jamba", false, 1, 1, 1.0},
    {"deepseek_v3", true, 8, 4, 2.5},
};
}  // namespace

ModelMoeConfig ModelMoeConfig::from_json(const nlohmann::json& root) {
  if (!root.is_object()) throw Error(Phase::Validate, "model config must be a JSON object");
  const std::string model_type = optional_field<std::string>(root, {"model_type"}).value_or("unknown");
  const bool dbrx = model_type == "dbrx";
  if (dbrx && root.contains("ffn_config") && root["ffn_config"].is_object()) return from_json(dbrx_as_common(root));
  // Multimodal configs (Llama-4) keep the language model under text_config.
  const nlohmann::json& j = root.contains("text_config") && root["text_config"].is_object() ? root["text_config"] : root;
  ModelMoeConfig m;
  m.model_type = model_type;
  for (const UnstatedRouting& d : kUnstatedRouting)
    if (model_type == d.model_type) {
      m.renormalize = d.renormalize;
      m.n_group = d.n_group;
      m.topk_group = d.topk_group;
      m.routed_scaling_factor = d.routed_scaling_factor;
    }
  // ERNIE-4.5's moe_num_experts / moe_k: the same fields under its own names.
  m.num_experts = required_int(j, {"num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts"});
  m.top_k = required_int(j, {"num_experts_per_tok", "moe_topk", "top_k", "moe_k"});
  m.hidden = required_int(j, {"hidden_size"});
  m.intermediate = required_int(j, {"moe_intermediate_size", "intermediate_size"});
  if (m.model_type == "phimoe")  // its router is not a top-k of scores: no silent stand-in
    throw Error(Phase::Validate, "model config: phimoe routes by sparsemixer, which moejit's router does not "
                                 "implement; build a MoeSpec yourself and pass the top-k ids and weights (the "
                                 "modular forward)");
  // Whether the config states these (the model_type rules below only fill what it leaves out).
  // A field present with another type is an error (json_fields.h), not read as absent.
  const auto scoring = optional_field<std::string>(j, {"scoring_func", "score_function"});
  const bool scoring_stated = scoring.has_value();
  if (scoring) m.scoring = *scoring;
  const auto norm = optional_field<bool>(j, {"norm_topk_prob"});
  const bool norm_stated = norm.has_value();
  if (norm) m.renormalize = *norm;
  m.n_group = optional_field<int>(j, {"n_group"}).value_or(m.n_group);
  m.topk_group = optional_field<int>(j, {"topk_group"}).value_or(m.topk_group);
  m.routed_scaling_factor = optional_field<double>(j, {"routed_scaling_factor"}).value_or(m.routed_scaling_factor);
  if (const auto act = optional_field<std::string>(j, {"hidden_act"})) m.activation = expert_activation(*act);
  auto dtype = optional_field<std::string>(j, {"torch_dtype", "dtype"});
  if (!dtype) dtype = optional_field<std::string>(root, {"torch_dtype", "dtype"});
  if (dtype) m.dtype = *dtype;
  // Routing rules the configs imply rather than state.
  if (m.model_type == "gpt_oss") {
    m.scoring = "softmax_after_topk";
    m.activation = "swigluoai";  // gate/up interleaved, alpha 1.702, limit 7
    m.expert_bias = true;
  }
  // GLM-4.5 / 4.6 (glm4_moe, glm4v_moe): sigmoid scores with a correction bias, grouped top-k,
  // though their configs name no scoring_func (as vLLM and SGLang run them).
  if (m.model_type.rfind("glm4", 0) == 0 && m.model_type.find("moe") != std::string::npos && !scoring_stated)
    m.scoring = "sigmoid";
  // Nemotron-H: sigmoid scores with a correction bias, single-input experts of mlp_hidden_act
  // (relu2 where the config does not say, as Hugging Face's NemotronHConfig), run in the latent
  // space where it has one (moe_latent_size: the projections in and out of it are the model's,
  // outside the experts).
  if (m.model_type == "nemotron_h") {
    if (!scoring_stated) m.scoring = "sigmoid";
    m.activation = single_input_activation(optional_field<std::string>(j, {"mlp_hidden_act"}).value_or("relu2"));  // HF's default
    if (first_present(j, {"moe_latent_size"})) m.hidden = required_int(j, {"moe_latent_size"});
  }
  // Hunyuan renormalizes from two experts on (a top-1 layer keeps its softmax weight) unless it says.
  if (m.model_type == "hunyuan_v1_moe" && !norm_stated) m.renormalize = m.top_k > 1;
  if (m.model_type.rfind("llama4", 0) == 0) {
    m.scoring = "sigmoid";  // Llama-4: top-1 on logits, weight = sigmoid(logit)
    m.renormalize = false;
    m.weight_on_input = true;
  }
  if (const nlohmann::json* q = first_present(root, {"quantization_config"})) {
    if (!q->is_object())
      throw Error(Phase::Validate, fmt::format("model config field quantization_config = {} is not an object", q->dump()));
    const ExpertQuant e = expert_quant_from_config(*q);
    m.quant = e.quant;
    m.quant_group = e.group;
    m.quant_zero_points = e.zero_points;
  }
  parse_scoring(m.scoring);  // an unknown scoring_func or activation is an error here, not at the first forward
  parse_activation(m.activation);
  if (m.top_k > m.num_experts)
    throw Error(Phase::Validate, fmt::format("model config: top_k = {} exceeds the {} experts", m.top_k, m.num_experts));
  if (m.n_group < 1 || m.num_experts % m.n_group != 0)
    throw Error(Phase::Validate, fmt::format("model config: {} experts are not divisible into n_group = {}",
                                             m.num_experts, m.n_group));
  return m;
}

ModelMoeConfig ModelMoeConfig::from_file(const std::filesystem::path& path) {
  std::string text;
  if (!try_read_file(path, text)) throw Error(Phase::Validate, fmt::format("cannot read model config {}", path.string()));
  try {
    return from_json(nlohmann::json::parse(text));
  } catch (const nlohmann::json::exception& e) {
    throw Error(Phase::Validate, fmt::format("model config {} is not valid JSON: {}", path.string(), e.what()));
  }
}

std::string ModelMoeConfig::describe() const {
  return fmt::format("{}: E={} top_k={} K={} N={} scoring={} renormalize={} n_group={} topk_group={} scale={} {}{}",
                     model_type, num_experts, top_k, hidden, intermediate, scoring, renormalize, n_group, topk_group,
                     routed_scaling_factor, dtype, quant == "none" ? "" : " quant=" + quant);
}

RouterConfig ModelMoeConfig::router_config(int block_m) const {
  RouterConfig c;
  c.num_experts = num_experts;
  c.top_k = top_k;
  c.scoring = parse_scoring(scoring);
  c.renormalize = renormalize;
  c.n_group = n_group;
  c.topk_group = n_group > 1 ? topk_group : 1;
  c.routed_scaling_factor = static_cast<float>(routed_scaling_factor);
  c.block_m = block_m;
  return c;
}

MoeSpec ModelMoeConfig::moe_spec() const {
  if (dtype != "bfloat16" && dtype != "float16")
    throw Error(Phase::Validate, fmt::format("model config: torch_dtype {}: moejit's experts run in bfloat16 or float16 "
                                             "(pass the dtype explicitly, e.g. moejit tune --dtype bf16)",
                                             dtype));
  return moe_spec(static_cast<MoeDType>(parse_dtype(dtype)));
}

MoeSpec ModelMoeConfig::moe_spec(MoeDType dtype) const {
  MoeSpec s;
  s.num_experts = num_experts;
  s.top_k = top_k;
  s.hidden = hidden;
  s.intermediate = intermediate;
  s.activation = static_cast<MoeActivation>(parse_activation(activation));
  s.dtype = dtype;
  const RouterConfig r = router_config();
  s.scoring = r.scoring;
  s.renormalize = r.renormalize;
  s.n_group = r.n_group;
  s.topk_group = r.topk_group;
  s.routed_scaling_factor = r.routed_scaling_factor;
  s.has_bias = expert_bias;
  s.router_weight_on_input = weight_on_input;
  s.quant = static_cast<MoeQuant>(parse_quant(quant));
  s.quant_group = quant_group;
  s.quant_zero_points = quant_zero_points;
  return s;
}

std::vector<KernelSpec> kernel_specs_for(const ModelMoeConfig& m, const std::string& arch, int max_tokens) {
  return moe_layer_kernel_specs(m.moe_spec(), max_tokens, arch);
}

}  // namespace moejit
