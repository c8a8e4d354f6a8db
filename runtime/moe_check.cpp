#include "runtime/moe_check.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "common/error.h"
#include "common/half_float.h"
#include "common/host_parallel.h"
#include "runtime/moe_quant.h"

namespace moejit {

namespace {

// v[i] = round_to_dtype(scale * U(-1, 1)), reproducible from (seed, i) whatever the thread count.
void fill_uniform(std::vector<float>& v, std::size_t count, std::uint64_t seed, double scale, int dtype) {
  v.resize(count);
  parallel_for(static_cast<std::int64_t>(count), [&](std::int64_t i) {
    const double u = double(splitmix64(seed * 0x100000001b3ull + std::uint64_t(i)) >> 11) * 0x1.0p-53 * 2.0 - 1.0;
    const float f = static_cast<float>(scale * u);
    v[i] = dtype < 0 ? f : half_bits_to_float(float_to_half_bits(f, dtype), dtype);
  });
}

std::vector<std::uint16_t> to_bits(const std::vector<float>& v, int dtype) {
  std::vector<std::uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = float_to_half_bits(v[i], dtype);
  return out;
}

// Host copies of the expert weights (fp32 values for the reference) stay under this: a larger
// layer (Llama-4 Maverick: 16e9 weights, 64 GB as floats) repeats fewer distinct experts.
constexpr std::size_t kMaxHostWeightBytes = std::size_t(4) << 30;

// A device buffer of `experts` experts, expert e a copy of the host's expert e % patterns (host:
// patterns experts of equal size, expert-major, as every weight, scale and zero-point tensor is).
template <typename T>
DeviceBuffer expert_copies(DriverApi& api, const std::vector<T>& host, std::size_t patterns, std::size_t experts) {
  if (patterns == experts || host.empty()) return DeviceBuffer::from(api, host);
  const std::size_t chunk = host.size() / patterns * sizeof(T);
  DeviceBuffer b(api, std::max<std::size_t>(1, chunk * experts));
  for (std::size_t e = 0; e < experts; ++e)
    b.upload(reinterpret_cast<const unsigned char*>(host.data()) + (e % patterns) * chunk, chunk, e * chunk);
  return b;
}

}  // namespace

MoeProblem::MoeProblem(DriverApi& api, const MoeSpec& spec, int max_tokens, std::size_t workspace_bytes,
                       std::uint64_t seed)
    : api_(api), spec_(spec), max_tokens_(max_tokens), workspace_bytes_(workspace_bytes) {
  spec_.validate();
  MOEJIT_REQUIRE(max_tokens >= 0, "moe problem: max_tokens = {} is negative", max_tokens);
  const std::size_t M = max_tokens, K = spec.hidden, N = spec.intermediate, R = spec.w1_rows();
  const std::size_t E = spec.num_experts, EL = spec.local_experts(), k = spec.top_k;
  const int dt = spec.dtype;
  fill_uniform(host_.hidden, M * K, seed + 1, 1.0, dt);
  QuantizedWeights q1, q2;
  // Distinct experts: every local one, unless their host copies would pass kMaxHostWeightBytes.
  const std::size_t per_expert = (R * K + K * N) * sizeof(float);
  const std::size_t P = std::clamp<std::size_t>(kMaxHostWeightBytes / per_expert, 1, std::max<std::size_t>(EL, 1));
  host_.expert_patterns = P < EL ? P : 0;
  if (spec.quant == kQuantNone) {
    fill_uniform(host_.w1, P * R * K, seed + 2, std::sqrt(3.0 / K), dt);
    fill_uniform(host_.w2, P * K * N, seed + 3, std::sqrt(3.0 / N), dt);
  } else {
    q1 = random_quantized_weights(spec, std::int64_t(P), R, K, std::sqrt(3.0 / K), seed + 2);
    q2 = random_quantized_weights(spec, std::int64_t(P), K, N, std::sqrt(3.0 / N), seed + 3);
    host_.w1 = std::move(q1.dequantized);
    host_.w2 = std::move(q2.dequantized);
    if (spec.quant == kQuantFp8Tensor) {
      host_.a1_scale = kStaticInputScale;         // |X| <= 1
      host_.a2_scale = kStaticIntermediateScale;  // the intermediate is O(1); larger values saturate (as on the GPU)
    }
  }
  if (spec.has_bias) {
    fill_uniform(host_.b1, EL * R, seed + 4, 0.5, -1);
    fill_uniform(host_.b2, EL * K, seed + 5, 0.5, -1);
  }
  std::vector<float> logit_values;
  const int logit_dtype = spec.logit_dtype == LogitType::F32 ? -1 : spec.logit_dtype == LogitType::BF16 ? 0 : 1;
  fill_uniform(logit_values, M * E, seed + 6, 2.0, logit_dtype);

  std::mt19937_64 rng(seed + 7);
  gen_ids_.resize(M * k);
  gen_weights_.resize(M * k);
  std::vector<int> perm(E);
  std::iota(perm.begin(), perm.end(), 0);
  std::uniform_real_distribution<float> weight(0.05f, 1.0f);
  for (std::size_t t = 0; t < M; ++t) {
    for (std::size_t s = 0; s < k; ++s) std::swap(perm[s], perm[s + rng() % (E - s)]);  // partial shuffle
    for (std::size_t s = 0; s < k; ++s) {
      gen_ids_[t * k + s] = perm[s];
      gen_weights_[t * k + s] = weight(rng);
    }
  }
  if (EL < E) {  // a random EL of the E experts are local, numbered in a shuffled order
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    host_.expert_map.assign(E, -1);
    for (std::size_t i = 0; i < EL; ++i) host_.expert_map[order[i]] = static_cast<int>(i);
  }

  hidden = DeviceBuffer::from(api, to_bits(host_.hidden, dt));
  if (spec.quant == kQuantNone) {
    weights.w1 = expert_copies(api, to_bits(host_.w1, dt), P, EL);
    weights.w2 = expert_copies(api, to_bits(host_.w2, dt), P, EL);
  } else {
    weights.w1 = expert_copies(api, q1.weights, P, EL);
    weights.w2 = expert_copies(api, q2.weights, P, EL);
    weights.w1_scale = expert_copies(api, q1.scales, P, EL);
    weights.w2_scale = expert_copies(api, q2.scales, P, EL);
    if (!q1.zeros.empty()) {
      weights.w1_zero = expert_copies(api, q1.zeros, P, EL);
      weights.w2_zero = expert_copies(api, q2.zeros, P, EL);
    }
    if (spec.quant == kQuantFp8Tensor) {
      weights.a1_scale = DeviceBuffer::from(api, std::vector<float>{host_.a1_scale});
      weights.a2_scale = DeviceBuffer::from(api, std::vector<float>{host_.a2_scale});
    }
  }
  if (spec.has_bias) {
    b1 = DeviceBuffer::from(api, host_.b1);
    b2 = DeviceBuffer::from(api, host_.b2);
  }
  logits = logit_dtype < 0 ? DeviceBuffer::from(api, logit_values) : DeviceBuffer::from(api, to_bits(logit_values, logit_dtype));
  topk_ids = DeviceBuffer::from(api, gen_ids_);
  topk_weights = DeviceBuffer::from(api, gen_weights_);
  if (!host_.expert_map.empty()) expert_map = DeviceBuffer::from(api, host_.expert_map);
  out = DeviceBuffer(api, std::max<std::size_t>(M * K * 2, 16));
  workspace = DeviceBuffer(api, std::max<std::size_t>(workspace_bytes, 256));
}

MoeForwardArgs MoeProblem::args(int m, bool modular) const {
  MOEJIT_REQUIRE(m >= 0 && m <= max_tokens_, "moe problem: {} tokens, at most {}", m, max_tokens_);
  MoeDevicePointers p;
  p.hidden = hidden.ptr();
  if (modular) {
    p.topk_ids = topk_ids.ptr();
    p.topk_weights = topk_weights.ptr();
  } else {
    p.router_logits = logits.ptr();
  }
  p.expert_map = expert_map.ptr();
  weights.point(p);
  if (spec_.has_bias) {
    p.b1 = b1.ptr();
    p.b2 = b2.ptr();
  }
  p.out = out.ptr();
  p.workspace = workspace.ptr();
  p.workspace_size = workspace.bytes();
  return contiguous_moe_args(spec_, m, p);
}

void MoeProblem::poison() {
  out.fill_u32(0x7fc07fc0u);        // bf16 NaN pairs (f16: a NaN as well)
  workspace.fill_u32(0x7fc07fc0u);  // fp32 NaN; the routing rewrites what it uses
}

std::vector<std::uint16_t> MoeProblem::output_bits(int m) const {
  return out.to_vector<std::uint16_t>(std::size_t(m) * spec_.hidden);
}

std::vector<float> MoeProblem::output(int m) const {
  const auto bits = output_bits(m);
  std::vector<float> v(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) v[i] = half_bits_to_float(bits[i], spec_.dtype);
  return v;
}

void MoeProblem::fetch_routing(const MoeLayer& layer, int m) {
  const RoutingResult r = layer.routing_result(args(m, false));
  const std::size_t n = std::size_t(m) * spec_.top_k;
  MOEJIT_CHECK_CU(api_, Launch, cuCtxSynchronize());
  host_.topk_ids.assign(std::max<std::size_t>(n, 1), 0);
  host_.topk_weights.assign(std::max<std::size_t>(n, 1), 0.f);
  if (n) {
    MOEJIT_CHECK_CU(api_, Launch, cuMemcpyDtoH(host_.topk_ids.data(), reinterpret_cast<CUdeviceptr>(r.topk_ids), n * 4));
    MOEJIT_CHECK_CU(api_, Launch,
                    cuMemcpyDtoH(host_.topk_weights.data(), reinterpret_cast<CUdeviceptr>(r.topk_weights), n * 4));
  }
}

void MoeProblem::use_generated_topk() {
  host_.topk_ids = gen_ids_;
  host_.topk_weights = gen_weights_;
}

double MoeProblem::relative_error(const std::vector<float>& got, const std::vector<int>& tokens) const {
  const auto ref = reference_moe(spec_, host_, tokens);
  const std::size_t K = spec_.hidden;
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < tokens.size(); ++i)
    for (std::size_t c = 0; c < K; ++c) {
      const double g = got[std::size_t(tokens[i]) * K + c], r = ref[i * K + c];
      if (!std::isfinite(g)) return std::nan("");
      diff += (g - r) * (g - r);
      norm += r * r;
    }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

std::vector<int> MoeProblem::sample_tokens(int m, int max_checked) {
  std::vector<int> out;
  if (m <= max_checked) {
    out.resize(m);
    std::iota(out.begin(), out.end(), 0);
    return out;
  }
  for (int i = 0; i < max_checked; ++i) out.push_back(static_cast<int>((long long)i * (m - 1) / (max_checked - 1)));
  return out;
}

}  // namespace moejit
