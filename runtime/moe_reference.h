// fp64 CPU reference of the MoE layer (after routing): for each selected token,
// out = sum over its top-k slots of weight * (act(x W1[e]^T + b1) W2[e]^T + b2), with the router
// weight on the input instead when the spec says so. Inputs are the values the GPU sees (already
// rounded to bf16/f16), held as floats (exact for 16-bit values); all arithmetic is fp64.
// Quantized weights: w1/w2 hold the dequantized values (q * scale, exact in fp32). w8a8 (fp8): X
// and the intermediate (rounded to DTYPE, as the GPU stores it) go through the same e4m3
// quantization as on the GPU (fp8_quantize_dequantize_row) before their GEMM.
#pragma once

#include <vector>

#include "runtime/moe_spec.h"

namespace moejit {

struct MoeHostTensors {
  std::vector<float> hidden;         // [M, K]
  std::vector<float> w1;             // [E_local, W1 rows, K]
  std::vector<float> w2;             // [E_local, K, N]
  // > 0: w1 and w2 hold this many experts, and local expert e's weights are those of expert
  // e % expert_patterns (MoeProblem on layers too large to keep every expert on the host).
  std::size_t expert_patterns = 0;
  std::vector<float> b1, b2;         // [E_local, W1 rows], [E_local, K]; empty = no bias
  std::vector<int> topk_ids;         // [M, top_k] global expert ids
  std::vector<float> topk_weights;   // [M, top_k]
  std::vector<int> expert_map;       // [E] global -> local, -1 = remote; empty = identity
  float a1_scale = 0, a2_scale = 0;  // fp8_tensor: static activation scales
};

double reference_activation_gated(MoeActivation act, double gate, double up, double alpha, double limit);
double reference_activation_single(MoeActivation act, double x);

// Output rows [tokens.size(), K] for the listed tokens (threads over tokens).
std::vector<double> reference_moe(const MoeSpec& spec, const MoeHostTensors& t, const std::vector<int>& tokens);

}  // namespace moejit
