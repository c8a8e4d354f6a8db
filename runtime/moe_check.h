// MoeProblem: a reproducible MoE problem on the device for tests, the demo, the example engine and
// the benchmark: random inputs rounded to the layer's dtype (host copies kept for the fp64
// reference), device buffers, poisoning, forward arguments, and the comparison with the reference.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/device_buffer.h"
#include "runtime/moe_layer.h"
#include "runtime/moe_quant.h"
#include "runtime/moe_reference.h"

namespace moejit {

class MoeProblem {
 public:
  // Inputs for up to max_tokens tokens: hidden U(-1, 1); W1, W2 scaled by 1/sqrt(fan-in) so every
  // stage stays O(1); biases U(-0.5, 0.5) when the spec has them; router logits N(0, 1)-like;
  // random distinct top-k ids with positive weights for the modular forward; with expert
  // parallelism a random half-local expert_map. Quantized layers: random codes and scales of the
  // same magnitudes (random_quantized_weights); the host copies hold the exact dequantized values.
  // Layers whose experts would take more than 4 GiB of host floats get fewer distinct experts,
  // repeated: expert e's weights are those of e % expert_patterns() (biases stay per expert).
  // workspace_bytes: MoeLayer::workspace_bytes(max_tokens) of the layer that will run it.
  MoeProblem(DriverApi& api, const MoeSpec& spec, int max_tokens, std::size_t workspace_bytes, std::uint64_t seed);

  const MoeSpec& spec() const { return spec_; }
  // Distinct expert weight sets (0: every local expert its own).
  std::size_t expert_patterns() const { return host_.expert_patterns; }
  MoeHostTensors& host() { return host_; }

  // Arguments for the first num_tokens tokens; modular = caller-given top-k instead of logits.
  MoeForwardArgs args(int num_tokens, bool modular) const;
  // Fills out and the workspace with NaN patterns, so unwritten outputs cannot pass.
  void poison();
  std::vector<float> output(int num_tokens) const;         // out as floats
  std::vector<std::uint16_t> output_bits(int num_tokens) const;
  // After a monolithic forward: copies the device's top-k into host().topk_* for the reference.
  void fetch_routing(const MoeLayer& layer, int num_tokens);
  // The modular top-k (host copies) as generated.
  void use_generated_topk();

  // ||out - ref|| / ||ref|| over `tokens` (NaN when out has a NaN); ref from reference_moe.
  double relative_error(const std::vector<float>& out, const std::vector<int>& tokens) const;
  // Token indices to check: all when few, else an even sample including the first and last.
  static std::vector<int> sample_tokens(int num_tokens, int max_checked);

  DeviceBuffer hidden, logits, topk_ids, topk_weights, expert_map, b1, b2, out, workspace;
  DeviceExpertWeights weights;  // W1, W2 as stored (+ scales, zero points, static scales)

 private:
  DriverApi& api_;
  MoeSpec spec_;
  int max_tokens_;
  std::size_t workspace_bytes_;
  MoeHostTensors host_;
  std::vector<int> gen_ids_;
  std::vector<float> gen_weights_;
};

}  // namespace moejit
