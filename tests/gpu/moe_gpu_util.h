// Helpers of the MoE GPU tests: run one forward on a poisoned problem and compare with the fp64
// reference.
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "runtime/moe_check.h"
#include "runtime/runtime.h"

namespace moejit::test {

// Relative-error band for bf16/f16 operands (issue: between 1e-3 and 1e-2); NaN never passes.
constexpr double kMoeErrorBand = 1e-2;
constexpr int kMaxCheckedTokens = 96;

struct MoeRun {
  std::unique_ptr<MoeLayer> layer;
  std::unique_ptr<MoeProblem> problem;
};

// min_workspace: room for another layer sharing the problem (e.g. the same spec, deterministic).
inline MoeRun make_moe_run(Runtime& rt, const MoeSpec& spec, int max_tokens, std::uint64_t seed,
                           std::size_t min_workspace = 0) {
  MoeRun r;
  r.layer = std::make_unique<MoeLayer>(rt, spec);
  r.problem = std::make_unique<MoeProblem>(rt.driver(), spec, max_tokens,
                                           std::max(min_workspace, r.layer->workspace_bytes(max_tokens)), seed);
  return r;
}

// Forward of the first m tokens on `stream`; returns the relative error over a token sample.
inline double forward_and_check(MoeRun& r, int m, bool modular, CUstream stream = nullptr) {
  r.problem->poison();
  r.layer->forward(stream, r.problem->args(m, modular));
  if (modular) r.problem->use_generated_topk();
  else r.problem->fetch_routing(*r.layer, m);  // synchronizes
  const auto out = r.problem->output(m);
  return r.problem->relative_error(out, MoeProblem::sample_tokens(m, kMaxCheckedTokens));
}

// The same for the caller's top-k (modular) through a given tile config.
inline double forward_and_check(MoeRun& r, int m, const MoeTileConfig& config) {
  r.problem->poison();
  r.layer->forward_with_config(nullptr, r.problem->args(m, true), config);
  r.problem->use_generated_topk();
  return r.problem->relative_error(r.problem->output(m), MoeProblem::sample_tokens(m, kMaxCheckedTokens));
}

inline bool within_band(double err) { return std::isfinite(err) && err <= kMoeErrorBand; }

// Relative-error bands of the quantized formats against the fp64 reference of the dequantized
// weights. Weight-only: the GPU multiplies 16-bit activations by the same weights (int4: (q - z) * s
// rounded once to DTYPE, which the reference does not do): the bf16 band. w8a8: the reference
// quantizes the activations as the kernels do; what remains is fp32 vs fp64 sums and e4m3 rounding
// flips where they differ. Measured on an H200 (largest over the quant suite): int8 2.4e-3, int4
// 3.5e-3, mxfp4 2.2e-3, fp8 block / channel / tensor 1.8e-3.
inline double quant_error_band(MoeQuant) { return kMoeErrorBand; }  // every format: 1e-2

}  // namespace moejit::test
