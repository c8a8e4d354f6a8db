// Quantized expert weights on the host side: the tensors each MoeSpec::quant expects (storage type
// and shape of the weights, their scales and zero points), the e4m3 / e2m1 / e8m0 codecs, random
// quantized weights with their exact dequantized values (tests, bench, tuner), and the fp8
// activation quantization the w8a8 kernels apply (for the fp64 reference).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/device_buffer.h"
#include "runtime/device_fill.h"
#include "runtime/moe_layer.h"
#include "runtime/moe_spec.h"
#include "runtime/tensor_view.h"

namespace moejit {

// What the kernels expect of one weight matrix W [E_local, rows, cols] (cols = the reduction dim).
struct QuantTensorLayout {
  ScalarType weight_type;
  TensorShape weight_shape;  // [E_local, rows, stored columns]
  bool has_scale = false;
  ScalarType scale_type = ScalarType::F32;
  TensorShape scale_shape;
  bool has_zero = false;                   // int4 zero points: U8, shaped as the scales
};
QuantTensorLayout quant_weight_layout(const MoeSpec& spec, std::int64_t experts, std::int64_t rows, std::int64_t cols);
// Bytes of one expert's matrix as stored (weights + scales + zero points): the bench's floor.
std::size_t quant_expert_bytes(const MoeSpec& spec, std::int64_t rows, std::int64_t cols);
// Bytes of one expert's W1 [w1_rows, hidden] and W2 [hidden, intermediate] as stored.
std::size_t quant_expert_weight_bytes(const MoeSpec& spec);

// Codecs. e4m3: OCP fp8 (bias 7, max 448, no infinities); round to nearest even, saturating.
std::uint8_t float_to_e4m3(float v);
float e4m3_to_float(std::uint8_t code);
float e2m1_to_float(std::uint8_t nibble);  // 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives
float e8m0_to_float(std::uint8_t code);    // 2^(code - 127)

// Random quantized weights for `experts` matrices [rows, cols], values of order `magnitude`.
struct QuantizedWeights {
  std::vector<std::uint8_t> weights;  // stored bytes (the layout's weight tensor)
  std::vector<std::uint8_t> scales;   // stored bytes of the scale tensor (fp32 / DTYPE bits / e8m0)
  std::vector<std::uint8_t> zeros;    // int4 zero points (when the spec has them)
  std::vector<float> dequantized;     // [experts, rows, cols]: exactly q * scale (- zero), exact in fp32
};
QuantizedWeights random_quantized_weights(const MoeSpec& spec, std::int64_t experts, std::int64_t rows,
                                          std::int64_t cols, double magnitude, std::uint64_t seed);

// A layer's expert weights on the device as stored: W1 and W2 (codes or 16-bit values), their
// scales and zero points, and fp8_tensor's static activation scales; empty buffers where the format
// has none. point() fills the matching MoeDevicePointers fields.
struct DeviceExpertWeights {
  DeviceBuffer w1, w2, w1_scale, w2_scale, w1_zero, w2_zero, a1_scale, a2_scale;
  void point(MoeDevicePointers& p) const;
};
// Random weights of `spec` for benchmarks and tuning, values ~ U(-1, 1) / sqrt(fan-in / 3): 16-bit
// layers filled on the device; quantized layers from one expert's random codes and scales generated
// on the host and copied to every local expert (the kernels read each expert's own bytes; host
// generation of every expert would take minutes for large models).
DeviceExpertWeights random_device_weights(DriverApi& api, DeviceFiller& filler, CUstream stream, const MoeSpec& spec,
                                          std::uint64_t seed);
// fp8_tensor's static activation scales for inputs of magnitude ~1 (X) and ~4 (the intermediate).
constexpr float kStaticInputScale = 1.f / kFp8E4m3Max;
constexpr float kStaticIntermediateScale = 4.f / kFp8E4m3Max;

// GPTQ checkpoints -> int4_group, for one weight matrix W [out, in] (moejit rows = out, K = in):
//   qweight u32 [in / 8, out]: 8 consecutive k per word, k ascending from the low bits;
//   scales 16-bit [in / group, out]; qzeros u32 [in / group, out / 8]: 8 columns per word, low bits
//   first, each stored as zero - zero_offset (1 in the original GPTQ format, 0 in the "v2" one).
// moejit's layout is the transpose: weights [out, in / 2] (the bytes of each word of a column, in
// order), scales and zero points [out, in / group]. One pass over the matrix on the host (O(in*out),
// ~1 s per GB of weights); do it once at load time. qzeros may be null (symmetric: zero point 8).
struct Int4Prepacked {
  std::vector<std::uint8_t> weights;   // [out, in / 2]
  std::vector<std::uint16_t> scales;   // [out, in / group], the checkpoint's 16-bit scale bits
  std::vector<std::uint8_t> zeros;     // [out, in / group]; empty when qzeros is null
};
Int4Prepacked prepack_gptq_int4(const std::uint32_t* qweight, const std::uint16_t* scales, const std::uint32_t* qzeros,
                                std::int64_t in_features, std::int64_t out_features, int group, int zero_offset);
// 8-bit GPTQ, symmetric, one scale per output column (group_size -1) -> int8_channel:
//   qweight u32 [in / 4, out]: 4 consecutive k per word, k ascending from the low byte; scales
//   16-bit [1, out] (dtype_code 0 bf16, 1 f16); qzeros u32 [1, out / 4] or null: every zero point
//   must be 128 (stored as 128 - zero_offset), w = (q - 128) * scale.
// moejit's layout: weights i8 [out, in] (q - 128), fp32 scales [out]. One pass on the host.
struct Int8Prepacked {
  std::vector<std::int8_t> weights;  // [out, in]
  std::vector<float> scales;         // [out]
};
Int8Prepacked prepack_gptq_int8(const std::uint32_t* qweight, const std::uint16_t* scales, const std::uint32_t* qzeros,
                                std::int64_t in_features, std::int64_t out_features, int scale_dtype_code,
                                int zero_offset);
// compressed-tensors int4 with zero points (pack-quantized, asymmetric): weight_packed is already
// int4_group's weights ([out, in / 8] i32 = [out, in / 2] bytes, codes + 8) and weight_scale its
// scales; weight_zero_point is i32 [ceil(out / 8), groups], 8 output rows per word from the low
// nibble, each zero + 8 like the codes. -> u8 zero points [out, groups] (w = (code - zero) * scale).
std::vector<std::uint8_t> unpack_compressed_int4_zero_points(const std::uint32_t* packed, std::int64_t out_features,
                                                             std::int64_t groups);
// AWQ (GEMM layout) -> int4_group: qweight u32 [in, out / 8] and qzeros u32 [in / group, out / 8]
// pack 8 output columns per word, nibble i holding column 8j + {0, 2, 4, 6, 1, 3, 5, 7}[i]; scales
// 16-bit [in / group, out]; w = (q - zero) * scale. Same output layout and cost as the GPTQ one.
Int4Prepacked prepack_awq_int4(const std::uint32_t* qweight, const std::uint16_t* scales, const std::uint32_t* qzeros,
                               std::int64_t in_features, std::int64_t out_features, int group);

// MXFP4 checkpoints (gpt-oss *_blocks, the `mxfp4` layout) -> `mxfp4_packed`, in place: each
// 32-bit word (8 consecutive k of a row) keeps its place and gets its bits reordered
// (templates/moe/mxfp4_packed.cuh), so the kernels decode a bf16 pair in 1-3 integer instructions
// and a multiply instead of ~4.75 (decode is bound by these instructions). The scales are
// unchanged. One pass over the bytes on the host's threads; do it once at load time, then run the
// layer with quant = mxfp4_packed. `bytes` must be whole words (every row is: K is a multiple of 32).
void prepack_mxfp4(std::uint8_t* blocks, std::size_t bytes);

// What the w8a8 kernels do to a row of activations before the e4m3 GEMM, dequantized again: per
// 128 columns (fp8_block) or per row (fp8_channel) scale = max(amax, 1e-10) / 448, or the given
// static scale (fp8_tensor); q = e4m3(x / scale) in fp32; returns q * scale. In place.
void fp8_quantize_dequantize_row(const MoeSpec& spec, float* row, std::int64_t cols, float static_scale);

}  // namespace moejit
