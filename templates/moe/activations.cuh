// Activations of the MoE expert MLP (template parameter ACT), shared by the GEMM1 epilogue and the
// stand-alone activation kernel of the unfused mode, so both compute bit-identical values.
// Semantics (DESIGN.md), d = intermediate size N:
//   silu_mul  silu(x[:d]) * x[d:]            gelu_mul / gelu_tanh_mul  gelu(x[:d]) * x[d:]
//   swigluoai gate = x[2i], up = x[2i+1] (interleaved): g = min(gate, limit),
//             u = clamp(up, -limit, limit), out = g * sigmoid(alpha * g) * (u + 1)
//   swiglustep min(silu(x[:d]), limit) * clamp(x[d:], -limit, limit)
//   silu / gelu / gelu_tanh / relu2: one input per output, no multiply.
#pragma once

#include "moe/activation_kinds.cuh"

namespace moejit {
namespace act {

// x * sigmoid(a x) with the hardware exponential and a fast divide (a few ulp off IEEE, far below
// the bf16 / fp16 rounding of the output): expf's range reduction and the IEEE divide's slow-path
// test and call were about half of a gated GEMM1 epilogue's instructions. For a x -> -inf the
// exponential overflows to inf and the quotient is 0, as the limit is.
__device__ inline float x_sigmoid(float x, float a) { return __fdividef(x, 1.f + __expf(-a * x)); }
__device__ inline float silu(float x) { return x_sigmoid(x, 1.f); }
__device__ inline float gelu_erf(float x) { return 0.5f * x * (1.f + erff(x * 0.70710678118654752f)); }
__device__ inline float gelu_tanh(float x) {
  const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);  // sqrt(2/pi)
  return 0.5f * x * (1.f + tanhf(inner));
}

// Gated activations: one output from (gate, up).
template <int ACT>
__device__ inline float gated(float gate, float up, float alpha, float limit) {
  if constexpr (ACT == kActSiluMul) {
    return silu(gate) * up;
  } else if constexpr (ACT == kActGeluMul) {
    return gelu_erf(gate) * up;
  } else if constexpr (ACT == kActGeluTanhMul) {
    return gelu_tanh(gate) * up;
  } else if constexpr (ACT == kActSwigluOai) {
    const float g = fminf(gate, limit);
    const float u = fminf(fmaxf(up, -limit), limit);
    return x_sigmoid(g, alpha) * (u + 1.f);
  } else {
    static_assert(ACT == kActSwigluStep, "not a gated activation");
    return fminf(silu(gate), limit) * fminf(fmaxf(up, -limit), limit);
  }
}

// Activations with one input per output (kActNone passes the value through).
template <int ACT>
__device__ inline float single(float x) {
  if constexpr (ACT == kActNone) {
    return x;
  } else if constexpr (ACT == kActSilu) {
    return silu(x);
  } else if constexpr (ACT == kActGelu) {
    return gelu_erf(x);
  } else if constexpr (ACT == kActGeluTanh) {
    return gelu_tanh(x);
  } else {
    static_assert(ACT == kActRelu2, "not a single-input activation");
    const float r = fmaxf(x, 0.f);
    return r * r;
  }
}

}  // namespace act
}  // namespace moejit
