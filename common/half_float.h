// Host conversions between fp32 and the 16-bit formats the kernels use (round to nearest even),
// for test inputs, references and examples. bf16 is the top half of an fp32; f16 uses the
// compiler's _Float16 (IEEE binary16).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace moejit {

inline std::uint16_t float_to_bf16_bits(float f) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN stays a quiet NaN
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
inline float bf16_bits_to_float(std::uint16_t b) { return std::bit_cast<float>(std::uint32_t(b) << 16); }

inline std::uint16_t float_to_f16_bits(float f) { return std::bit_cast<std::uint16_t>(static_cast<_Float16>(f)); }
inline float f16_bits_to_float(std::uint16_t b) { return static_cast<float>(std::bit_cast<_Float16>(b)); }

// dtype_code: MoeDType (kDTypeBF16 = 0, kDTypeF16 = 1).
inline std::uint16_t float_to_half_bits(float f, int dtype_code) {
  return dtype_code == 0 ? float_to_bf16_bits(f) : float_to_f16_bits(f);
}
inline float half_bits_to_float(std::uint16_t b, int dtype_code) {
  return dtype_code == 0 ? bf16_bits_to_float(b) : f16_bits_to_float(b);
}

}  // namespace moejit
