// A Hugging Face config's quantization_config -> the expert weight format (MoeSpec::quant and its
// group / zero points), for ModelMoeConfig::from_json. Methods: mxfp4, fp8, gptq, awq,
// compressed-tensors (llm-compressor's schemes), fbgemm_fp8 and modelopt (FP8). A scheme no moejit format computes
// as the checkpoint does is an error naming what differs, never the nearest format. (One exception,
// documented: fbgemm_fp8's activation_scale_ub, a cap on a token's amax that moejit does not apply:
// a token above it gets its own, finer scale.)
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace moejit {

struct ExpertQuant {
  std::string quant = "none";  // parse_quant spelling
  int group = 128;             // int4_group (kQuantGroupPerRow: one scale per weight row)
  bool zero_points = false;    // int4_group
};

// Throws Error(Validate).
ExpertQuant expert_quant_from_config(const nlohmann::json& quantization_config);

}  // namespace moejit
