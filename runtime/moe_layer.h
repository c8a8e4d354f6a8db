// MoeLayer: the fused-experts MoE layer on the caller's stream.
//   routing (router logits -> top-k -> metadata, or caller-given top-k ids/weights -> metadata)
//   -> GEMM1 (gather X rows, x W1[e]^T, bias, activation) -> intermediate
//   -> GEMM2 (x W2[e]^T, bias, x router weight) -> top-k reduction into out [M, K].
// forward() allocates nothing, never synchronizes the host and is CUDA-graph capturable; every
// tensor is checked (dtype, shape, strides, alignment, null) before the first launch.
#pragma once

#include <cuda.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "autotune/moe_heuristic.h"
#include "autotune/tuned_db.h"
#include "jit/kernel_spec.h"
#include "runtime/moe_spec.h"
#include "runtime/router.h"
#include "runtime/tensor_view.h"

namespace moejit {

class Runtime;
class Module;

struct MoeForwardArgs {
  TensorView hidden;           // [M, K] dtype; rows 16-byte aligned
  // Monolithic: router logits in (and optionally the grouped top-k correction bias).
  TensorView router_logits;    // [M, E] logit dtype
  TensorView correction_bias;  // [E] f32, optional
  // Modular: the caller's top-k.
  TensorView topk_ids;         // [M, top_k] i32, contiguous
  TensorView topk_weights;     // [M, top_k] f32, contiguous
  TensorView expert_map;       // [E] i32 global -> local (-1 = remote); required when E_local < E
  TensorView w1;               // [E_local, W1 rows, K] dtype (W1 rows = 2N gated, else N); quantized:
  TensorView w2;               // [E_local, K, N] dtype        as quant_weight_layout says (moe_quant.h)
  // Quantized weights (spec.quant): scales and int4 zero points of W1 / W2, shaped as
  // quant_weight_layout says; fp8_tensor also takes static activation scales a1 (X), a2 (intermediate).
  TensorView w1_scale, w2_scale;
  TensorView w1_zero, w2_zero;
  TensorView a1_scale, a2_scale;  // f32 [1]
  TensorView b1;               // [E_local, W1 rows] f32 (spec.has_bias)
  TensorView b2;               // [E_local, K] f32 (spec.has_bias)
  TensorView out;              // [M, K] dtype
  CUdeviceptr workspace = 0;   // 256-byte aligned, >= workspace_bytes(M)
  std::size_t workspace_size = 0;
};

// Device addresses of row-major, contiguous MoE tensors shaped as MoeForwardArgs documents; 0 = not
// given. For callers that own plain buffers (tests, the demo, the bench, the tuner).
struct MoeDevicePointers {
  CUdeviceptr hidden = 0, router_logits = 0, correction_bias = 0, topk_ids = 0, topk_weights = 0, expert_map = 0;
  CUdeviceptr w1 = 0, w2 = 0, b1 = 0, b2 = 0, out = 0, workspace = 0;
  CUdeviceptr w1_scale = 0, w2_scale = 0, w1_zero = 0, w2_zero = 0, a1_scale = 0, a2_scale = 0;
  std::size_t workspace_size = 0;
};
// The forward arguments for `num_tokens` tokens over such buffers: a view for every non-zero address.
MoeForwardArgs contiguous_moe_args(const MoeSpec& spec, int num_tokens, const MoeDevicePointers& p);
ScalarType scalar_type_of(MoeDType dtype);
ScalarType scalar_type_of(LogitType type);

// Intermediate buffers the unfused mode exposes between its stages (device pointers).
struct MoeStageBuffers {
  int num_tokens = 0;
  std::size_t max_rows = 0;         // capacity of the padded-row buffers
  CUdeviceptr gemm1_out = 0;        // [max_rows, W1 rows] dtype: GEMM1 without activation
  CUdeviceptr intermediate = 0;     // [max_rows, N] dtype: after the activation
  CUdeviceptr slot_rows = 0;        // [M * top_k, K] f32: GEMM2 rows, weighted, before the top-k sum
  const int* gather_index = nullptr;   // [max_rows] padded row -> token * top_k + slot, -1 = padding
  const int* scatter_index = nullptr;  // [M * top_k] -> padded row, -1 = dropped
  const int* totals = nullptr;         // device: routed rows, padded rows, tiles
};

// Injection points of the unfused mode (e.g. LoRA deltas): called on the host in stage order, with
// the stream to enqueue work on; each may modify the named buffer in place.
struct MoeStageHooks {
  std::function<void(CUstream, const MoeStageBuffers&)> after_gemm1;
  std::function<void(CUstream, const MoeStageBuffers&)> after_activation;
  std::function<void(CUstream, const MoeStageBuffers&)> after_gemm2;
};

// Every kernel a layer with `spec` may launch for 1..max_tokens tokens on `arch` (routing included);
// needs no GPU: CI and `moejit compile --model` compile these ahead.
std::vector<KernelSpec> moe_layer_kernel_specs(const MoeSpec& spec, int max_tokens, const std::string& arch);
// The kernels of one forward with tile config `config` (expert stages only); gemm2_rows16: GEMM2
// stores per-slot DTYPE rows for the reduce16 kernel (moe_gemm2_stores_rows16) instead of fp32 adds.
std::vector<KernelSpec> moe_expert_kernel_specs(const MoeSpec& spec, const MoeTileConfig& config,
                                                const std::string& arch, bool gemm2_rows16 = false);
// The decode GEMV pair's kernels (tile config gemv; routing from the layer's router config).
KernelSpec moe_decode_spec(const MoeSpec& spec, const std::string& arch);
// Whether a forward of num_tokens tokens with `config` has GEMM2 store per-slot DTYPE rows that a
// separate kernel sums (kRoleGemm2Rows16) instead of adding fp32 rows atomically into the token's
// row: config.topk_sum; Auto = the fused fast mode with an unsplit GEMM2, from 64 MiB of adds
// (M * top_k * hidden * 4) on, monotone in num_tokens. Error where Rows is asked of the
// deterministic or unfused mode or a split GEMM2.
bool moe_gemm2_stores_rows16(const MoeSpec& spec, const MoeTileConfig& config, long long num_tokens);
// GEMM2's roles (false: fp32 adds / rows, true: DTYPE rows) over forwards of 1..max_tokens tokens
// with `config` (the rule is monotone in the token count, so the ends decide).
std::vector<bool> moe_gemm2_roles_upto(const MoeSpec& spec, const MoeTileConfig& config, int max_tokens);
// The routing a layer runs: spec.router_config() with the workspace sized for every tile config.
RouterConfig moe_layer_router_config(const MoeSpec& spec);
// Shared memory one CTA of an expert GEMM spec takes (dynamic + the static row arrays of a
// block_m-row tile); 0 for the other families.
long long moe_gemm_shared_bytes(const KernelSpec& gemm, int block_m);

class MoeLayer {
 public:
  MoeLayer(Runtime& runtime, MoeSpec spec);  // validates; throws Error(Validate)
  ~MoeLayer();
  MoeLayer(const MoeLayer&) = delete;
  MoeLayer& operator=(const MoeLayer&) = delete;

  const MoeSpec& spec() const { return spec_; }
  std::size_t workspace_bytes(int num_tokens) const;
  // The tuned DB's config for the nearest tuned batch (read at prepare / the first forward on a
  // GPU), else the heuristic's.
  MoeTileConfig tile_config(int num_tokens) const;
  bool tuned() const;  // whether tuned configs were found for this layer on this device
  // Compiles (in parallel) and loads every kernel for up to max_tokens tokens.
  void prepare(int max_tokens);

  // Checks every tensor and the workspace as forward() does, without launching (no GPU needed);
  // throws Error(Validate) naming the first problem.
  void check(const MoeForwardArgs& args) const;
  void forward(CUstream stream, const MoeForwardArgs& args, const MoeStageHooks* hooks = nullptr);
  // forward() with a given tile config instead of the layer's choice (the tuner times these).
  void forward_with_config(CUstream stream, const MoeForwardArgs& args, const MoeTileConfig& config,
                           const MoeStageHooks* hooks = nullptr);
  // Where the routing of a forward with `args` lives in its workspace (top-k ids and weights of the
  // monolithic forward, metadata); for tests and debugging.
  RoutingResult routing_result(const MoeForwardArgs& args) const;
  // Local experts with at least one routed row in the last forward with `args` (synchronizes; the
  // bench and the tuner count the weight bytes of their floors with it).
  int experts_touched(const MoeForwardArgs& args);
  // Bits of RoutingErrorFlags the last routing raised (synchronizes; for tests and debugging).
  int routing_error_flags(const MoeForwardArgs& args);

 private:
  struct Kernels;
  struct Workspace;
  Workspace carve(const MoeForwardArgs& args, int num_tokens) const;
  const Kernels& kernels_for(const MoeTileConfig& config, bool gemm2_rows16);
  // The decode GEMV pair (tile config gemv): moe_decode_forward.cpp.
  void forward_decode(CUstream stream, const MoeForwardArgs& args, int num_tokens, const Kernels& k);
  // w8a8: `rows` rows of DTYPE at `in` -> e4m3 at `out` + scales (moe_act_quant).
  struct ActQuantRows {
    CUdeviceptr in;
    long long ld_in;
    CUdeviceptr out, scale;
    int cols;
    long long rows;
    const int* totals;  // device row count (totals[1]) instead of rows, or null
    const int* gather;  // rows < 0 there are skipped, or null
    const TensorView& static_scale;
  };
  void quantize_activations(CUstream stream, const Kernels& k, const ActQuantRows& rows, bool overlap_previous) const;
  // Every GEMM of `specs` fits this device's shared memory per CTA (an Error naming it otherwise).
  void require_fits_device(const std::vector<KernelSpec>& specs, int block_m) const;
  void load_tuned();  // once, on a GPU: the tuned buckets of this shape (memory only afterwards)
  void tune_now(int max_tokens);  // MOEJIT_TUNE=1 and nothing tuned: tune, save, use

  Runtime& runtime_;
  MoeSpec spec_;
  Router router_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Kernels>> kernels_;  // one per tile config and GEMM2 role used
  bool tuned_loaded_ = false;
  std::vector<TunedEntry> tuned_;  // ascending M; configs checked against the device
  mutable std::mutex tuned_mutex_;
};

}  // namespace moejit
