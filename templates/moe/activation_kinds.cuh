// Activation codes (template parameter ACT) and their shape rules. Plain C++: the host includes
// this header too, so both sides agree on the codes and on which activations are gated.
#pragma once

#include "common/host_device.cuh"

namespace moejit {

enum MoeActivation : int {
  kActNone = 0,         // GEMM1 output as is (unfused mode: [rows, W1 rows])
  kActSiluMul = 1,
  kActGeluMul = 2,      // erf gelu
  kActGeluTanhMul = 3,  // tanh-approximated gelu
  kActSwigluOai = 4,    // gpt-oss: interleaved gate/up, alpha, limit
  kActSwigluStep = 5,   // limit
  kActSilu = 6,
  kActGelu = 7,
  kActGeluTanh = 8,
  kActRelu2 = 9,
};

// Gated activations read two W1 rows (gate, up) per output column: W1 has 2N rows.
MOEJIT_HOST_DEVICE constexpr bool activation_is_gated(int act) { return act >= kActSiluMul && act <= kActSwigluStep; }
// Gate and up rows alternate (gate = row 2i, up = row 2i+1) instead of two halves.
MOEJIT_HOST_DEVICE constexpr bool activation_is_interleaved(int act) { return act == kActSwigluOai; }

}  // namespace moejit
