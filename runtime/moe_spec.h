// MoeSpec: what an engine's MoE layer is (shapes, dtype, activation, routing rule, bias, reduction
// mode). validate() explains everything that is unsupported at once (can_implement-style).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/router.h"
#include "templates/common/dtype_kinds.cuh"
#include "templates/moe/activation_kinds.cuh"
#include "templates/moe/quant_kinds.cuh"

namespace moejit {

enum class ReduceMode {
  Fast,           // GEMM2 adds into an fp32 accumulator with atomics; order varies between runs
  Deterministic,  // GEMM2 writes per-slot fp32 rows; a top-k sum in slot order: bitwise stable,
                  // and a token's output does not depend on the batch it runs in
};

struct MoeSpec {
  int num_experts = 0;   // E (global)
  int top_k = 0;
  int hidden = 0;        // K: model width; a multiple of 8
  int intermediate = 0;  // N: expert width; a multiple of 8
  MoeActivation activation = kActSiluMul;  // kActNone is not a layer activation
  MoeDType dtype = kDTypeBF16;             // hidden states, weights and output
  // Routing of the monolithic forward (router logits in).
  Scoring scoring = Scoring::Softmax;
  bool renormalize = true;
  int n_group = 1;
  int topk_group = 1;
  float routed_scaling_factor = 1.f;
  LogitType logit_dtype = LogitType::BF16;
  int num_local_experts = -1;           // expert parallelism: -1 = all E local; else expert_map required
  bool has_bias = false;                // fp32 biases b1 [E_local, W1 rows], b2 [E_local, K]
  bool router_weight_on_input = false;  // Llama-4: scale GEMM1's input instead of GEMM2's output
  ReduceMode reduce = ReduceMode::Fast;
  bool fused = true;                    // false: GEMM1, activation, GEMM2, top-k sum as separate stages
  float swiglu_alpha = 1.702f;          // swigluoai
  float swiglu_limit = 7.0f;            // swigluoai, swiglustep
  // Quantized experts (templates/moe/quant_kinds.cuh documents each layout; docs/quantization.md).
  MoeQuant quant = kQuantNone;
  // int4_group: k elements per scale (32, 64 or 128), or kQuantGroupPerRow: one scale (and zero
  // point) per weight row over all of k, per channel (GPTQ's group_size -1).
  int quant_group = 128;
  bool quant_zero_points = false;       // int4_group: per-group uint8 zero points (else 8)

  int local_experts() const { return num_local_experts < 0 ? num_experts : num_local_experts; }
  // int4_group: k elements a scale covers in a reduction of k_total (all of it per weight row).
  std::int64_t int4_group_k(std::int64_t k_total) const {
    return quant_group == kQuantGroupPerRow ? k_total : quant_group;
  }
  int w1_rows() const { return activation_is_gated(activation) ? 2 * intermediate : intermediate; }
  RouterConfig router_config() const;   // block sizes left at their defaults
  std::vector<std::string> unsupported() const;  // empty = supported
  void validate() const;                          // throws Error(Validate) listing every reason
  std::string describe() const;                   // one line for logs and errors

  // {"num_experts": 64, "top_k": 6, "hidden": 2048, "intermediate": 1408, "activation": "silu_mul",
  //  "dtype": "bf16", "scoring": "softmax", ...}: every field named as here; unknown fields are an
  // error (a typo must not silently fall back to a default).
  nlohmann::json to_json() const;
  static MoeSpec from_json(const nlohmann::json& j);  // throws Error(Validate)
};

}  // namespace moejit
