#include "runtime/moe_quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/half_float.h"
#include "common/host_parallel.h"
#include "jit/moe_names.h"
#include "runtime/driver.h"
#include "templates/moe/mxfp4_packed.cuh"

namespace moejit {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// U(0, 1) from (seed, stream, index): reproducible whatever the thread count.
double uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t i) {
  return double(splitmix64(splitmix64(seed * 0x100000001b3ull + stream) ^ i) >> 11) * 0x1.0p-53;
}

void put_f32(std::vector<std::uint8_t>& bytes, std::size_t index, float v) {
  std::memcpy(bytes.data() + index * 4, &v, 4);
}
void put_u16(std::vector<std::uint8_t>& bytes, std::size_t index, std::uint16_t v) {
  std::memcpy(bytes.data() + index * 2, &v, 2);
}
// A scale with an 8-bit significand: q * scale is exact in fp32 for the 8-bit and 4-bit codes.
float short_scale(double v) { return bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(v))); }

}  // namespace

QuantTensorLayout quant_weight_layout(const MoeSpec& s, std::int64_t e, std::int64_t rows, std::int64_t cols) {
  QuantTensorLayout l;
  const ScalarType dt = s.dtype == kDTypeBF16 ? ScalarType::BF16 : ScalarType::F16;
  switch (s.quant) {
    case kQuantNone:
      l.weight_type = dt;
      l.weight_shape = {e, rows, cols};
      break;
    case kQuantInt8Channel:
      l.weight_type = ScalarType::I8;
      l.weight_shape = {e, rows, cols};
      l.has_scale = true;
      l.scale_shape = {e, rows};
      break;
    case kQuantInt4Group:
      l.weight_type = ScalarType::U8;
      l.weight_shape = {e, rows, cols / 2};
      l.has_scale = true;
      l.scale_type = dt;
      l.scale_shape = {e, rows, cols / s.int4_group_k(cols)};
      l.has_zero = s.quant_zero_points;
      break;
    case kQuantMxfp4:
    case kQuantMxfp4Packed:
      l.weight_type = ScalarType::U8;
      l.weight_shape = {e, rows, cols / 2};
      l.has_scale = true;
      l.scale_type = ScalarType::U8;
      l.scale_shape = {e, rows, cols / kMxfp4GroupSize};
      break;
    case kQuantFp8Block:
      l.weight_type = ScalarType::F8E4M3;
      l.weight_shape = {e, rows, cols};
      l.has_scale = true;
      l.scale_shape = {e, ceil_div(rows, kQuantFp8BlockSize), ceil_div(cols, kQuantFp8BlockSize)};
      break;
    case kQuantFp8Channel:
      l.weight_type = ScalarType::F8E4M3;
      l.weight_shape = {e, rows, cols};
      l.has_scale = true;
      l.scale_shape = {e, rows};
      break;
    case kQuantFp8Tensor:
      l.weight_type = ScalarType::F8E4M3;
      l.weight_shape = {e, rows, cols};
      l.has_scale = true;
      l.scale_shape = {e};
      break;
  }
  return l;
}

std::size_t quant_expert_bytes(const MoeSpec& s, std::int64_t rows, std::int64_t cols) {
  const QuantTensorLayout l = quant_weight_layout(s, 1, rows, cols);
  auto count = [](const TensorShape& shape) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return static_cast<std::size_t>(n);
  };
  std::size_t bytes = count(l.weight_shape) * scalar_type_size(l.weight_type);
  if (l.has_scale) bytes += count(l.scale_shape) * scalar_type_size(l.scale_type);
  if (l.has_zero) bytes += count(l.scale_shape);
  return bytes;
}

std::size_t quant_expert_weight_bytes(const MoeSpec& s) {
  return quant_expert_bytes(s, s.w1_rows(), s.hidden) + quant_expert_bytes(s, s.hidden, s.intermediate);
}

std::uint8_t float_to_e4m3(float v) {
  if (std::isnan(v)) return 0x7f;
  const std::uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const double a = std::fabs(double(v));
  if (a >= 448.0) return sign | 0x7e;  // satfinite
  if (a < 0x1.0p-6) {                  // subnormal: m * 2^-9 (m = 8 is the smallest normal)
    return sign | static_cast<std::uint8_t>(std::nearbyint(a * 512.0));
  }
  int e = static_cast<int>(std::floor(std::log2(a)));
  if (std::ldexp(1.0, e) > a) --e;  // log2 rounding at powers of two
  if (std::ldexp(1.0, e + 1) <= a) ++e;
  int m = static_cast<int>(std::nearbyint((a / std::ldexp(1.0, e) - 1.0) * 8.0));
  if (m == 8) {
    m = 0;
    ++e;
  }
  const int code = ((e + 7) << 3) | m;
  return sign | static_cast<std::uint8_t>(std::min(code, 0x7e));
}

float e4m3_to_float(std::uint8_t code) {
  const int e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::nanf("");
  const double mag = e == 0 ? m * 0x1.0p-9 : std::ldexp(1.0 + m / 8.0, e - 7);
  return static_cast<float>(code & 0x80 ? -mag : mag);
}

float e2m1_to_float(std::uint8_t nibble) {
  static const float kMagnitude[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float mag = kMagnitude[nibble & 7];
  return nibble & 8 ? -mag : mag;
}

float e8m0_to_float(std::uint8_t code) {
  return code == 255 ? std::nanf("") : static_cast<float>(std::ldexp(1.0, int(code) - 127));
}

QuantizedWeights random_quantized_weights(const MoeSpec& s, std::int64_t experts, std::int64_t rows,
                                          std::int64_t cols, double magnitude, std::uint64_t seed) {
  MOEJIT_REQUIRE(s.quant != kQuantNone, "random_quantized_weights: the spec has no quantization");
  const QuantTensorLayout l = quant_weight_layout(s, experts, rows, cols);
  QuantizedWeights q;
  const std::int64_t R = rows, C = cols, total = experts * R * C;
  q.dequantized.resize(total);
  std::int64_t scale_count = 1;
  for (auto d : l.scale_shape) scale_count *= d;
  q.weights.resize(total * quant_weight_bits(s.quant) / 8);
  q.scales.resize(scale_count * scalar_type_size(l.scale_type));
  if (l.has_zero) q.zeros.resize(scale_count);
  auto u = [&](std::uint64_t stream, std::int64_t i) { return uniform(seed, stream, std::uint64_t(i)); };

  // Scales first (one pass over the scale tensor), then every (expert, row) in parallel.
  std::vector<float> scale(scale_count), zero(scale_count, 8.f);
  for (std::int64_t i = 0; i < scale_count; ++i) {
    const double jitter = 0.75 + 0.5 * u(1, i);
    switch (s.quant) {
      case kQuantInt8Channel: scale[i] = short_scale(magnitude / 127 * jitter); put_f32(q.scales, i, scale[i]); break;
      case kQuantInt4Group: {
        const std::uint16_t bits = float_to_half_bits(static_cast<float>(magnitude / 8 * jitter), s.dtype);
        scale[i] = half_bits_to_float(bits, s.dtype);
        put_u16(q.scales, i, bits);
        if (l.has_zero) {
          q.zeros[i] = static_cast<std::uint8_t>(4 + int(u(2, i) * 8));  // 4..11
          zero[i] = q.zeros[i];
        }
        break;
      }
      case kQuantMxfp4:
      case kQuantMxfp4Packed: {
        const int code = 127 + static_cast<int>(std::floor(std::log2(magnitude / 3))) - int(u(2, i) * 2);
        q.scales[i] = static_cast<std::uint8_t>(std::clamp(code, 1, 254));
        scale[i] = e8m0_to_float(q.scales[i]);
        break;
      }
      default: scale[i] = short_scale(magnitude / 448 * jitter); put_f32(q.scales, i, scale[i]); break;
    }
  }
  const std::int64_t group = s.quant == kQuantInt4Group ? s.int4_group_k(C) : kMxfp4GroupSize;
  parallel_for(experts * R, [&](std::int64_t er) {
    const std::int64_t e = er / R, r = er % R;
    for (std::int64_t c = 0; c < C; ++c) {
      const std::int64_t i = er * C + c;
      std::int64_t si = 0;  // scale index of (e, r, c)
      switch (s.quant) {
        case kQuantInt8Channel:
        case kQuantFp8Channel: si = er; break;
        case kQuantInt4Group:
        case kQuantMxfp4:
        case kQuantMxfp4Packed: si = er * (C / group) + c / group; break;
        case kQuantFp8Block:
          si = (e * l.scale_shape[1] + r / kQuantFp8BlockSize) * l.scale_shape[2] + c / kQuantFp8BlockSize;
          break;
        default: si = e; break;
      }
      const double x = u(3, i);
      float value = 0;
      if (s.quant == kQuantInt8Channel) {
        const int code = static_cast<int>(x * 255) - 127;  // -127..127
        q.weights[i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(code));
        value = static_cast<float>(code) * scale[si];
      } else if (s.quant == kQuantInt4Group || quant_is_mxfp4(s.quant)) {
        const std::uint8_t nibble = static_cast<std::uint8_t>(x * 16) & 15;
        q.weights[i / 2] |= static_cast<std::uint8_t>(nibble << (4 * (i & 1)));  // low nibble = even k
        value = s.quant == kQuantInt4Group ? (static_cast<float>(nibble) - zero[si]) * scale[si]
                                            : e2m1_to_float(nibble) * scale[si];
      } else {
        const std::uint8_t code = float_to_e4m3(static_cast<float>((2 * x - 1) * 448));
        q.weights[i] = code;
        value = e4m3_to_float(code) * scale[si];
      }
      q.dequantized[i] = value;
    }
  });
  if (s.quant == kQuantMxfp4Packed) prepack_mxfp4(q.weights.data(), q.weights.size());
  return q;
}

void prepack_mxfp4(std::uint8_t* blocks, std::size_t bytes) {
  MOEJIT_REQUIRE(bytes % 4 == 0, "prepack_mxfp4: {} bytes is not whole 32-bit words (8 codes each)", bytes);
  parallel_for(static_cast<std::int64_t>(bytes / 4), [&](std::int64_t i) {
    std::uint32_t w;
    std::memcpy(&w, blocks + 4 * i, 4);
    w = mxfp4_pack_word(w);
    std::memcpy(blocks + 4 * i, &w, 4);
  });
}

void DeviceExpertWeights::point(MoeDevicePointers& p) const {
  p.w1 = w1.ptr();
  p.w2 = w2.ptr();
  p.w1_scale = w1_scale.ptr();
  p.w2_scale = w2_scale.ptr();
  p.w1_zero = w1_zero.ptr();
  p.w2_zero = w2_zero.ptr();
  p.a1_scale = a1_scale.ptr();
  p.a2_scale = a2_scale.ptr();
}

DeviceExpertWeights random_device_weights(DriverApi& api, DeviceFiller& filler, CUstream stream, const MoeSpec& s,
                                          std::uint64_t seed) {
  const std::size_t K = s.hidden, N = s.intermediate, R = s.w1_rows(), EL = s.local_experts();
  DeviceExpertWeights d;
  if (s.quant == kQuantNone) {
    const ScalarType dt = s.dtype == kDTypeBF16 ? ScalarType::BF16 : ScalarType::F16;
    d.w1 = DeviceBuffer(api, EL * R * K * 2);
    d.w2 = DeviceBuffer(api, EL * K * N * 2);
    filler.fill(stream, d.w1.ptr(), EL * R * K, dt, seed, float(std::sqrt(3.0 / double(K))));
    filler.fill(stream, d.w2.ptr(), EL * K * N, dt, seed + 1, float(std::sqrt(3.0 / double(N))));
    return d;
  }
  auto upload = [&](std::size_t rows, std::size_t cols, std::uint64_t matrix_seed, DeviceBuffer& w, DeviceBuffer& scale,
                    DeviceBuffer& zero) {
    const QuantizedWeights q = random_quantized_weights(s, 1, std::int64_t(rows), std::int64_t(cols),
                                                        std::sqrt(3.0 / double(cols)), matrix_seed);
    auto replicate = [&](const std::vector<std::uint8_t>& one, DeviceBuffer& dst) {
      if (one.empty()) return;
      dst = DeviceBuffer(api, EL * one.size());
      for (std::size_t e = 0; e < EL; ++e)
        MOEJIT_CHECK_CU(api, Launch, cuMemcpyHtoD(dst.ptr() + e * one.size(), one.data(), one.size()));
    };
    replicate(q.weights, w);
    replicate(q.scales, scale);
    replicate(q.zeros, zero);
  };
  upload(R, K, seed, d.w1, d.w1_scale, d.w1_zero);
  upload(K, N, seed + 1, d.w2, d.w2_scale, d.w2_zero);
  if (s.quant == kQuantFp8Tensor) {
    d.a1_scale = DeviceBuffer::from(api, std::vector<float>{kStaticInputScale});
    d.a2_scale = DeviceBuffer::from(api, std::vector<float>{kStaticIntermediateScale});
  }
  return d;
}

Int4Prepacked prepack_gptq_int4(const std::uint32_t* qweight, const std::uint16_t* scales, const std::uint32_t* qzeros,
                                std::int64_t in, std::int64_t out, int group, int zero_offset) {
  MOEJIT_REQUIRE(in > 0 && out > 0 && in % 8 == 0 && out % 8 == 0,
                 "prepack_gptq_int4: in_features = {} and out_features = {} must be positive multiples of 8", in, out);
  MOEJIT_REQUIRE(group > 0 && in % group == 0, "prepack_gptq_int4: group {} does not divide in_features = {}", group, in);
  const std::int64_t groups = in / group;
  Int4Prepacked p;
  p.weights.resize(out * in / 2);
  p.scales.resize(out * groups);
  if (qzeros) p.zeros.resize(out * groups);
  for (std::int64_t n = 0; n < out; ++n) {
    for (std::int64_t w = 0; w < in / 8; ++w) {
      const std::uint32_t word = qweight[w * out + n];
      for (int b = 0; b < 4; ++b) p.weights[n * (in / 2) + w * 4 + b] = static_cast<std::uint8_t>(word >> (8 * b));
    }
    for (std::int64_t g = 0; g < groups; ++g) {
      p.scales[n * groups + g] = scales[g * out + n];
      if (qzeros) {
        const int z = static_cast<int>((qzeros[g * (out / 8) + n / 8] >> (4 * (n % 8))) & 0xfu) + zero_offset;
        MOEJIT_REQUIRE(z <= 255, "prepack_gptq_int4: zero point {} out of range", z);
        p.zeros[n * groups + g] = static_cast<std::uint8_t>(z);
      }
    }
  }
  return p;
}

Int8Prepacked prepack_gptq_int8(const std::uint32_t* qweight, const std::uint16_t* scales, const std::uint32_t* qzeros,
                                std::int64_t in, std::int64_t out, int scale_dtype_code, int zero_offset) {
  MOEJIT_REQUIRE(in > 0 && out > 0 && in % 4 == 0 && out % 4 == 0,
                 "prepack_gptq_int8: in_features = {} and out_features = {} must be positive multiples of 4", in, out);
  MOEJIT_REQUIRE(scale_dtype_code == 0 || scale_dtype_code == 1,
                 "prepack_gptq_int8: scale_dtype_code {} is not 0 (bf16) or 1 (f16)", scale_dtype_code);
  Int8Prepacked p;
  p.weights.resize(out * in);
  p.scales.resize(out);
  for (std::int64_t n = 0; n < out; ++n) {
    if (qzeros) {  // int8_channel has no zero points: symmetric checkpoints only
      const int z = static_cast<int>((qzeros[n / 4] >> (8 * (n % 4))) & 0xffu) + zero_offset;
      MOEJIT_REQUIRE(z == 128, "prepack_gptq_int8: column {} has zero point {}, not 128 (int8_channel is symmetric)", n, z);
    }
    p.scales[n] = half_bits_to_float(scales[n], scale_dtype_code);
    for (std::int64_t w = 0; w < in / 4; ++w) {
      const std::uint32_t word = qweight[w * out + n];
      for (int b = 0; b < 4; ++b)
        p.weights[n * in + w * 4 + b] = static_cast<std::int8_t>(static_cast<int>((word >> (8 * b)) & 0xffu) - 128);
    }
  }
  return p;
}

std::vector<std::uint8_t> unpack_compressed_int4_zero_points(const std::uint32_t* packed, std::int64_t out,
                                                             std::int64_t groups) {
  MOEJIT_REQUIRE(out > 0 && groups > 0, "unpack_compressed_int4_zero_points: out_features = {} and groups = {} must be "
                 "positive", out, groups);
  std::vector<std::uint8_t> zeros(out * groups);
  for (std::int64_t n = 0; n < out; ++n)
    for (std::int64_t g = 0; g < groups; ++g)
      zeros[n * groups + g] = static_cast<std::uint8_t>((packed[(n / 8) * groups + g] >> (4 * (n % 8))) & 0xfu);
  return zeros;
}

Int4Prepacked prepack_awq_int4(const std::uint32_t* qweight, const std::uint16_t* scales, const std::uint32_t* qzeros,
                               std::int64_t in, std::int64_t out, int group) {
  MOEJIT_REQUIRE(in > 0 && out > 0 && in % 8 == 0 && out % 8 == 0,
                 "prepack_awq_int4: in_features = {} and out_features = {} must be positive multiples of 8", in, out);
  MOEJIT_REQUIRE(group > 0 && in % group == 0, "prepack_awq_int4: group {} does not divide in_features = {}", group, in);
  MOEJIT_REQUIRE(qzeros != nullptr, "prepack_awq_int4: AWQ checkpoints carry zero points (qzeros)");
  static constexpr int kNibbleOfColumn[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // inverse of {0, 2, 4, 6, 1, 3, 5, 7}
  const std::int64_t groups = in / group, words = out / 8;
  auto nibble = [&](std::uint32_t word, std::int64_t n) { return (word >> (4 * kNibbleOfColumn[n % 8])) & 0xfu; };
  Int4Prepacked p;
  p.weights.assign(out * in / 2, 0);
  p.scales.resize(out * groups);
  p.zeros.resize(out * groups);
  for (std::int64_t k = 0; k < in; ++k)
    for (std::int64_t n = 0; n < out; ++n)
      p.weights[n * (in / 2) + k / 2] |= static_cast<std::uint8_t>(nibble(qweight[k * words + n / 8], n) << (4 * (k % 2)));
  for (std::int64_t g = 0; g < groups; ++g)
    for (std::int64_t n = 0; n < out; ++n) {
      p.scales[n * groups + g] = scales[g * out + n];
      p.zeros[n * groups + g] = static_cast<std::uint8_t>(nibble(qzeros[g * words + n / 8], n));
    }
  return p;
}

void fp8_quantize_dequantize_row(const MoeSpec& s, float* row, std::int64_t cols, float static_scale) {
  MOEJIT_REQUIRE(quant_is_fp8(s.quant), "fp8_quantize_dequantize_row: quant {} is not w8a8", quant_name(s.quant));
  const std::int64_t group = s.quant == kQuantFp8Block ? kQuantFp8BlockSize : cols;
  for (std::int64_t c0 = 0; c0 < cols; c0 += group) {
    const std::int64_t c1 = std::min(c0 + group, cols);
    float scale = static_scale;
    if (s.quant != kQuantFp8Tensor) {
      float amax = 0.f;
      for (std::int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(row[c]));
      scale = std::max(amax, 1e-10f) / kFp8E4m3Max;
    }
    // The kernels' rule (moe_act_quant.cuh): times the reciprocal, rounded once, not a division.
    const float inv = 1.f / scale;
    for (std::int64_t c = c0; c < c1; ++c) row[c] = e4m3_to_float(float_to_e4m3(row[c] * inv)) * scale;
  }
}

}  // namespace moejit
