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

inline bool within_band(double err) { return std::isfinite(err) && err <= kMoeErrorBand; }

}  // namespace moejit::test
