// Arguments and constants of the routing_topk kernel. Plain C types only: the host includes this too.
#pragma once

namespace moejit {

// How router logits become expert scores (template parameter SCORING).
enum RoutingScoring : int {
  kScoringSoftmax = 0,           // softmax over all experts, then top-k (Mixtral, Qwen3-MoE)
  kScoringSigmoid = 1,           // sigmoid per expert (DeepSeek-V3, Llama-4 top-1)
  kScoringSoftmaxAfterTopk = 2,  // top-k on logits, softmax over the selected logits (gpt-oss)
};

// Element type of the logits (template parameter LOGIT_DTYPE).
enum RoutingLogitType : int { kLogitF32 = 0, kLogitBF16 = 1, kLogitF16 = 2 };

struct RoutingTopkArgs {
  const void* logits;            // [num_tokens, row_stride] of LOGIT_DTYPE; first num_experts used
  long long row_stride;          // elements between consecutive tokens' rows
  const float* correction_bias;  // [num_experts] added for selection only; null = none
  int num_tokens;
  int num_experts;
  float routed_scaling_factor;   // multiplies every weight
  int* topk_ids;                 // [num_tokens, TOPK]
  float* topk_weights;           // [num_tokens, TOPK]
};

}  // namespace moejit
