// Router: the whole routing on the device — top-k selection from router logits, then the metadata
// the expert GEMMs consume — in one launch for small batches (routing_fused "route") and three for
// larger ones (routing_fused "topk_rank", then routing_sort's scan and scatter). One workspace, no
// allocation, no host synchronization: route() can be captured into a CUDA graph. The modular entry
// (caller-given topk ids) is sorter().run().
#pragma once

#include <cuda.h>

#include <memory>

#include "runtime/routing_sort_launcher.h"
#include "templates/routing/routing_fused_args.cuh"

namespace moejit {

enum class Scoring { Softmax, Sigmoid, SoftmaxAfterTopk };
enum class LogitType { F32, BF16, F16 };

const char* scoring_name(Scoring s);    // spec spelling: softmax, sigmoid, softmax_after_topk
Scoring parse_scoring(const std::string& name);  // also accepts HF's scoring_func values

struct RouterConfig {
  int num_experts = 0;
  int top_k = 0;
  Scoring scoring = Scoring::Softmax;
  bool renormalize = true;
  int n_group = 1;       // grouped top-k (DeepSeek): E / n_group contiguous experts per group
  int topk_group = 1;    // groups kept
  float routed_scaling_factor = 1.f;
  LogitType logit_type = LogitType::BF16;
  int block_m = 64;
  int min_block_m = 0;         // smallest block_m route() may ask for; 0 = block_m
  int num_local_experts = -1;  // -1 = all local
};

// The routing_topk spec a router configuration needs on `arch` (complete; throws Error(Validate)).
KernelSpec routing_topk_spec(const RouterConfig& config, const std::string& arch);
// The fused routing kernels: top-k + metadata in one launch for up to kRouterFusedTokens tokens, or
// top-k + count for kRouterFusedTokens tokens per CTA (= the sorter's tokens_per_cta).
KernelSpec routing_fused_spec(const RouterConfig& config, const std::string& arch);
constexpr int kRouterFusedTokens = 32;
constexpr int kRouterFusedMaxLocalExperts = kRoutingFusedThreads;  // the one-CTA kernel's block scan over experts
// Bytes the one-launch route kernel zeroes for its caller at most: one CTA's stores (~0.5 us); a
// memset over the whole GPU is faster beyond.
constexpr std::size_t kRouterZeroMaxBytes = std::size_t(64) << 10;

struct RoutingResult {
  int* topk_ids = nullptr;        // [max_tokens, top_k]
  float* topk_weights = nullptr;  // [max_tokens, top_k]
  RoutingSortBuffers sort;
};

class Router {
 public:
  Router(Runtime& runtime, RouterConfig config);  // validates; throws Error(Validate)
  const RouterConfig& config() const { return config_; }
  KernelSpec topk_spec(const std::string& arch) const;
  KernelSpec fused_spec(const std::string& arch) const;
  RoutingSorter& sorter() { return sorter_; }
  const RoutingSorter& sorter() const { return sorter_; }

  std::size_t workspace_bytes(int max_tokens) const;
  RoutingResult carve(CUdeviceptr workspace, int max_tokens) const;
  void prepare();

  // logits: [num_tokens, row_stride] of config.logit_type; correction_bias: [E] fp32 or 0;
  // expert_map: [E] int32 or 0. M = 0 is a valid no-op that still writes zero totals. Up to
  // kRouterFusedTokens tokens (and at most kRouterFusedMaxLocalExperts local experts) take one
  // launch; more take three.
  // zero / zero_bytes: a region the launch zeroes too (allowed where zeroes_for() says so).
  // beside_previous (sm_90+): the first routing kernel starts under the previous kernel on the
  // stream (programmatic dependent launch) and waits for it only before it exits, so the caller
  // promises that the previous kernel touches nothing the routing reads or writes and that
  // everything before that kernel is done once it runs (it was launched without overlap). The MoE
  // layer quantizes x (fp8) this way beside the routing.
  void route(CUstream stream, CUdeviceptr logits, long long row_stride, CUdeviceptr correction_bias,
             CUdeviceptr expert_map, int num_tokens, int max_tokens, const RoutingResult& out, int block_m = 0,
             CUdeviceptr zero = 0, std::size_t zero_bytes = 0, bool beside_previous = false);
  // Whether route() of num_tokens tokens can zero zero_bytes bytes on the way: one launch (the route
  // kernel), at most kRouterZeroMaxBytes, whole 16-byte words.
  bool zeroes_for(int num_tokens, std::size_t zero_bytes) const;
  bool one_launch(int num_tokens) const;  // route() of num_tokens tokens is the one route kernel

 private:
  Runtime& runtime_;
  RouterConfig config_;
  RoutingSorter sorter_;
  std::shared_ptr<const Module> fused_module_;
  int fused_padded_ = 0;  // the fused kernels' key block width
};

// fp64 CPU reference of the top-k selection. logits: [num_tokens, num_experts]; bias empty = none.
struct TopkReference {
  std::vector<int> ids;
  std::vector<double> weights;
  std::vector<double> select;  // [num_tokens, num_experts] the selection key (for near-tie checks)
};
TopkReference reference_routing_topk(const std::vector<double>& logits, int num_tokens, const RouterConfig& config,
                                     const std::vector<double>& bias);

}  // namespace moejit
