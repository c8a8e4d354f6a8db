// The MoE part of a Hugging Face config.json (Mixtral, Qwen2/Qwen3-MoE, DeepSeek-V2/V3/V4, gpt-oss,
// Llama-4, GLM-4.5, Jamba, Nemotron-H, ERNIE-4.5, DBRX's ffn_config, ...): experts, top_k, sizes and the
// routing rule, with errors that name the missing field. Routing fields a config leaves out take its
// Hugging Face config class's defaults (model_config.cpp: kUnstatedRouting). Rules a model's code
// implies rather than its config states are set by model_type (gpt-oss, Llama-4, GLM-4.5 and
// Nemotron-H sigmoid scores, Jamba without renormalization); a router moejit does not implement
// (phimoe's sparsemixer) is an error, never a stand-in.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "jit/kernel_spec.h"
#include "runtime/moe_spec.h"
#include "runtime/router.h"

namespace moejit {

struct ModelMoeConfig {
  std::string model_type;
  int num_experts = 0;   // num_local_experts / n_routed_experts / num_experts / moe_num_experts
  int top_k = 0;         // num_experts_per_tok / moe_topk / top_k / moe_k
  int hidden = 0;        // hidden_size (K)
  int intermediate = 0;  // moe_intermediate_size, else intermediate_size (N)
  std::string scoring = "softmax";  // scoring_func (or score_function)
  bool renormalize = true;          // norm_topk_prob
  int n_group = 1, topk_group = 1;
  double routed_scaling_factor = 1.0;
  std::string activation = "silu_mul";  // from hidden_act: silu -> silu_mul, gelu -> gelu_mul, ...

  // torch_dtype (or dtype, as newer configs spell it): the activations' and 16-bit weights' type,
  // bfloat16 when the config has neither. moe_spec() takes it; other values (float32) are an error
  // there, naming the field, unless the caller gives the dtype itself.
  std::string dtype = "bfloat16";
  bool expert_bias = false;         // gpt-oss: fp32 biases on both expert projections
  bool weight_on_input = false;     // Llama-4: the router weight scales the expert input
  // Expert weight format from quantization_config (model_quant_config.h, docs/quantization.md):
  // mxfp4, fp8, gptq, awq, compressed-tensors, fbgemm_fp8; anything else is an error naming it.
  std::string quant = "none";
  int quant_group = 128;
  bool quant_zero_points = false;

  // The router this model uses (scoring rule, grouping, renormalization, scaling).
  RouterConfig router_config(int block_m = 64) const;
  // The MoE layer of this model (activation from hidden_act; gpt-oss: swigluoai with biases), in
  // the config's dtype or the one given.
  MoeSpec moe_spec() const;
  MoeSpec moe_spec(MoeDType dtype) const;

  static ModelMoeConfig from_json(const nlohmann::json& config);  // throws Error(Validate)
  static ModelMoeConfig from_file(const std::filesystem::path& path);
  std::string describe() const;
};

// The kernel specs a layer of this model needs on `arch` for up to max_tokens tokens (compiled ahead
// by `moejit compile --model` and the demo).
std::vector<KernelSpec> kernel_specs_for(const ModelMoeConfig& model, const std::string& arch, int max_tokens = 8192);

}  // namespace moejit
