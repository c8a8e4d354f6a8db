#include "runtime/moe_reference.h"

#include <algorithm>
#include <cmath>

#include "common/half_float.h"
#include "common/host_parallel.h"
#include "runtime/moe_quant.h"

namespace moejit {

namespace {
double silu(double x) { return x / (1.0 + std::exp(-x)); }
double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}
}  // namespace

double reference_activation_gated(MoeActivation act, double gate, double up, double alpha, double limit) {
  switch (act) {
    case kActSiluMul: return silu(gate) * up;
    case kActGeluMul: return gelu_erf(gate) * up;
    case kActGeluTanhMul: return gelu_tanh(gate) * up;
    case kActSwigluOai: {
      const double g = std::min(gate, limit), u = std::clamp(up, -limit, limit);
      return g / (1.0 + std::exp(-alpha * g)) * (u + 1.0);
    }
    case kActSwigluStep: return std::min(silu(gate), limit) * std::clamp(up, -limit, limit);
    default: return std::nan("");
  }
}

double reference_activation_single(MoeActivation act, double x) {
  switch (act) {
    case kActNone: return x;
    case kActSilu: return silu(x);
    case kActGelu: return gelu_erf(x);
    case kActGeluTanh: return gelu_tanh(x);
    case kActRelu2: return x > 0 ? x * x : 0.0;
    default: return std::nan("");
  }
}

std::vector<double> reference_moe(const MoeSpec& s, const MoeHostTensors& t, const std::vector<int>& tokens) {
  const std::size_t K = s.hidden, N = s.intermediate, R = s.w1_rows(), k = s.top_k;
  const bool gated = activation_is_gated(s.activation), interleaved = activation_is_interleaved(s.activation);
  const bool fp8 = quant_is_fp8(s.quant);
  std::vector<double> out(tokens.size() * K, 0.0);
  auto one_token = [&](std::size_t i) {
    const std::size_t tok = tokens[i];
    std::vector<double> h(R), act(N);
    std::vector<float> xq, actq(fp8 ? N : 0);
    if (fp8) {
      xq.assign(t.hidden.begin() + tok * K, t.hidden.begin() + (tok + 1) * K);
      fp8_quantize_dequantize_row(s, xq.data(), static_cast<std::int64_t>(K), t.a1_scale);
    }
    for (std::size_t slot = 0; slot < k; ++slot) {
      const int global = t.topk_ids[tok * k + slot];
      const int e = t.expert_map.empty() ? global : t.expert_map[global];
      if (e < 0) continue;  // remote expert: contributes zero here
      const double w = t.topk_weights[tok * k + slot];
      const double in_scale = s.router_weight_on_input ? w : 1.0;
      const double out_scale = s.router_weight_on_input ? 1.0 : w;
      const float* x = fp8 ? xq.data() : &t.hidden[tok * K];
      const std::size_t we = t.expert_patterns > 0 ? std::size_t(e) % t.expert_patterns : std::size_t(e);  // weights' expert
      for (std::size_t r = 0; r < R; ++r) {
        const float* wr = &t.w1[(we * R + r) * K];
        double acc = 0;
        for (std::size_t c = 0; c < K; ++c) acc += double(x[c]) * wr[c];
        h[r] = acc * in_scale + (t.b1.empty() ? 0.0 : t.b1[std::size_t(e) * R + r]);
        // Unfused: the GPU stores GEMM1's output in DTYPE before the activation reads it.
        if (!s.fused) h[r] = half_bits_to_float(float_to_half_bits(static_cast<float>(h[r]), s.dtype), s.dtype);
      }
      for (std::size_t j = 0; j < N; ++j) {
        if (gated) {
          const double gate = interleaved ? h[2 * j] : h[j];
          const double up = interleaved ? h[2 * j + 1] : h[N + j];
          act[j] = reference_activation_gated(s.activation, gate, up, s.swiglu_alpha, s.swiglu_limit);
        } else {
          act[j] = reference_activation_single(s.activation, h[j]);
        }
      }
      if (fp8) {  // the GPU stores the intermediate in DTYPE, then quantizes it
        for (std::size_t j = 0; j < N; ++j)
          actq[j] = half_bits_to_float(float_to_half_bits(static_cast<float>(act[j]), s.dtype), s.dtype);
        fp8_quantize_dequantize_row(s, actq.data(), static_cast<std::int64_t>(N), t.a2_scale);
        for (std::size_t j = 0; j < N; ++j) act[j] = actq[j];
      }
      for (std::size_t c = 0; c < K; ++c) {
        const float* wr = &t.w2[(we * K + c) * N];
        double acc = 0;
        for (std::size_t j = 0; j < N; ++j) acc += act[j] * double(wr[j]);
        out[i * K + c] += (acc + (t.b2.empty() ? 0.0 : t.b2[std::size_t(e) * K + c])) * out_scale;
      }
    }
  };
  parallel_for(static_cast<std::int64_t>(tokens.size()), [&](std::int64_t i) { one_token(std::size_t(i)); });
  return out;
}

}  // namespace moejit
