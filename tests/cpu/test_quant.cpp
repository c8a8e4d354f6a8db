// Quantized experts without a GPU: the host codecs (e4m3, e2m1, e8m0), random quantized weights and
// their exact dequantized values, the fp8 activation emulation of the reference, spec validation
// of every format and the checks of quantized forward arguments (malformed scales, packing, groups).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/half_float.h"
#include "jit/moe_names.h"
#include "runtime/model_config.h"
#include "runtime/moe_layer.h"
#include "runtime/moe_quant.h"
#include "runtime/runtime.h"
#include "support/test_support.h"
#include "templates/moe/mxfp4_packed.cuh"

using namespace moejit;
using namespace moejit::test;

TEST_CASE("quant: e4m3 codec rounds to nearest even, saturates, round-trips every code") {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) {
      CHECK(std::isnan(e4m3_to_float(std::uint8_t(code))));
      continue;
    }
    const float v = e4m3_to_float(std::uint8_t(code));
    INFO("code " << code << " value " << v);
    if (code == 0x80) CHECK(float_to_e4m3(v) == 0x80);  // -0 keeps its sign
    else CHECK(float_to_e4m3(v) == code);
  }
  CHECK(e4m3_to_float(0x7e) == 448.f);
  CHECK(e4m3_to_float(0x01) == std::ldexp(1.f, -9));  // smallest subnormal
  CHECK(e4m3_to_float(0x08) == std::ldexp(1.f, -6));  // smallest normal
  CHECK(float_to_e4m3(1000.f) == 0x7e);                // satfinite
  CHECK(float_to_e4m3(-1000.f) == 0xfe);
  CHECK(e4m3_to_float(float_to_e4m3(1.0625f)) == 1.f);  // halfway between 1 and 1.125: to even (1)
  CHECK(e4m3_to_float(float_to_e4m3(1.1875f)) == 1.25f);  // halfway between 1.125 and 1.25: to even (1.25)
  CHECK(e4m3_to_float(float_to_e4m3(0.0009765625f)) == 0.f);  // 2^-10: halfway to 2^-9, to even (0)
}

TEST_CASE("quant: e2m1 and e8m0 decode as the OCP MX spec says") {
  const float expected[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  for (int n = 0; n < 8; ++n) {
    CHECK(e2m1_to_float(std::uint8_t(n)) == expected[n]);
    CHECK(e2m1_to_float(std::uint8_t(n | 8)) == -expected[n]);
  }
  CHECK(e8m0_to_float(127) == 1.f);
  CHECK(e8m0_to_float(130) == 8.f);
  CHECK(e8m0_to_float(120) == std::ldexp(1.f, -7));
  CHECK(std::isnan(e8m0_to_float(255)));
}

namespace {
MoeSpec quant_spec(MoeQuant q) {
  MoeSpec s;
  s.num_experts = 4;
  s.top_k = 2;
  s.hidden = 256;
  s.intermediate = 128;
  s.quant = q;
  return s;
}
}  // namespace

TEST_CASE("quant: random quantized weights decode to their stored codes exactly") {
  // (int4 twice: groups of 64 k, then one scale per weight row.)
  const std::pair<MoeQuant, int> formats[] = {{kQuantInt8Channel, 64}, {kQuantInt4Group, 64},
                                              {kQuantInt4Group, kQuantGroupPerRow}, {kQuantMxfp4, 64},
                                              {kQuantMxfp4Packed, 64}, {kQuantFp8Block, 64},
                                              {kQuantFp8Channel, 64}, {kQuantFp8Tensor, 64}};
  for (const auto& [q, group] : formats) {
    MoeSpec s = quant_spec(q);
    s.quant_group = group;
    s.quant_zero_points = q == kQuantInt4Group;
    const std::int64_t E = 3, R = 160, C = 256;  // 160 rows: two 128-row fp8 blocks, the second partial
    const auto w = random_quantized_weights(s, E, R, C, 0.1, 42);
    const QuantTensorLayout l = quant_weight_layout(s, E, R, C);
    INFO(quant_name(q) << " group " << group);
    if (q == kQuantInt4Group) {
      CHECK(l.scale_shape.size() == 3);
      CHECK(l.scale_shape[2] == (group > 0 ? C / group : 1));
    }
    CHECK(w.weights.size() == std::size_t(E * R * C * quant_weight_bits(q) / 8));
    CHECK(w.dequantized.size() == std::size_t(E * R * C));
    CHECK(w.zeros.empty() == !l.has_zero);
    // Decode a few elements by hand from the stored bytes and compare.
    for (std::int64_t i : {std::int64_t(0), std::int64_t(1), std::int64_t(R * C + 77), std::int64_t(E * R * C - 1)}) {
      const std::int64_t e = i / (R * C), r = (i / C) % R, c = i % C;
      float scale = 0, value = 0;
      switch (q) {
        case kQuantInt8Channel:
          std::memcpy(&scale, &w.scales[(e * R + r) * 4], 4);
          value = float(std::int8_t(w.weights[i])) * scale;
          break;
        case kQuantInt4Group: {
          const std::int64_t g = group > 0 ? group : C;
          const std::size_t si = (e * R + r) * (C / g) + c / g;
          std::uint16_t bits;
          std::memcpy(&bits, &w.scales[si * 2], 2);
          const int nibble = (w.weights[i / 2] >> (4 * (i & 1))) & 15;
          value = (float(nibble) - float(w.zeros[si])) * bf16_bits_to_float(bits);
          break;
        }
        case kQuantMxfp4: {
          const std::size_t si = (e * R + r) * (C / 32) + c / 32;
          value = e2m1_to_float((w.weights[i / 2] >> (4 * (i & 1))) & 15) * e8m0_to_float(w.scales[si]);
          break;
        }
        case kQuantMxfp4Packed: {  // code i % 8 of its word, through the kernels' decode
          const std::size_t si = (e * R + r) * (C / 32) + c / 32;
          std::uint32_t word;
          std::memcpy(&word, &w.weights[(i / 8) * 4], 4);
          value = e2m1_to_float(std::uint8_t(mxfp4_packed_code(word, int(i % 8)))) * e8m0_to_float(w.scales[si]);
          break;
        }
        case kQuantFp8Block: {
          const std::size_t si = (e * 2 + r / 128) * 2 + c / 128;
          std::memcpy(&scale, &w.scales[si * 4], 4);
          value = e4m3_to_float(w.weights[i]) * scale;
          break;
        }
        case kQuantFp8Channel:
          std::memcpy(&scale, &w.scales[(e * R + r) * 4], 4);
          value = e4m3_to_float(w.weights[i]) * scale;
          break;
        default:
          std::memcpy(&scale, &w.scales[e * 4], 4);
          value = e4m3_to_float(w.weights[i]) * scale;
          break;
      }
      CHECK(w.dequantized[i] == value);
    }
    double sum2 = 0;
    for (float v : w.dequantized) sum2 += double(v) * v;
    const double rms = std::sqrt(sum2 / double(w.dequantized.size()));
    CHECK(rms > 0.02);  // values of the asked magnitude, not zeros
    CHECK(rms < 0.2);
  }
}

TEST_CASE("quant: the reference's fp8 activation quantization matches the kernel's rule") {
  MoeSpec s = quant_spec(kQuantFp8Block);
  std::vector<float> row(300);
  for (std::size_t i = 0; i < row.size(); ++i) row[i] = std::sin(float(i)) * (i < 128 ? 1.f : 100.f);
  std::vector<float> q = row;
  fp8_quantize_dequantize_row(s, q.data(), 300, 0.f);
  // Group 0 (|x| <= 1): scale amax / 448; every value within half an e4m3 step (2^-4 relative).
  for (int i = 0; i < 300; ++i) CHECK(std::fabs(q[i] - row[i]) <= std::fabs(row[i]) * 0.0625f + 1e-6f);
  float amax = 0;
  for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(row[i]));
  const float scale = amax / 448.f;
  CHECK(q[5] == e4m3_to_float(float_to_e4m3(row[5] * (1.f / scale))) * scale);
  // Static scale (fp8_tensor): values beyond 448 * scale saturate.
  s.quant = kQuantFp8Tensor;
  std::vector<float> big = {1.f, 10.f, -1000.f};
  fp8_quantize_dequantize_row(s, big.data(), 3, 1.f / 448.f);
  CHECK(big[0] == 1.f);
  CHECK(big[1] == 1.f);
  CHECK(big[2] == -1.f);
}

TEST_CASE("quant: spec validation names the format's shape rules") {
  auto why = [](MoeSpec s) {
    std::string all;
    for (const auto& w : s.unsupported()) all += w + "\n";
    return all;
  };
  MoeSpec s = quant_spec(kQuantInt4Group);
  s.quant_group = 48;
  CHECK(why(s).find("quant_group = 48 must be 32, 64 or 128, or -1") != std::string::npos);
  s.quant_group = 0;
  CHECK(why(s).find("quant_group = 0 must be") != std::string::npos);
  // One scale per weight row (GPTQ's group_size -1): whole 16-byte chunks of 32 codes, any number of them.
  s.quant_group = kQuantGroupPerRow;
  s.hidden = 96;
  s.intermediate = 160;
  CHECK(why(s).empty());
  s.hidden = 80;
  CHECK(why(s).find("multiples of 32") != std::string::npos);
  s.hidden = 256;
  s.quant_group = 128;
  s.intermediate = 192;  // not a multiple of the group
  CHECK(why(s).find("multiples of 128") != std::string::npos);
  s = quant_spec(kQuantMxfp4);
  s.hidden = 240;
  CHECK(why(s).find("multiples of 32") != std::string::npos);
  s = quant_spec(kQuantFp8Block);
  s.hidden = 200;
  CHECK(why(s).find("multiples of 16") != std::string::npos);
  s = quant_spec(kQuantFp8Channel);
  s.quant_zero_points = true;
  CHECK(why(s).find("quant_zero_points applies to int4_group only") != std::string::npos);
  // JSON round trip and an unknown format.
  MoeSpec j = quant_spec(kQuantInt4Group);
  j.quant_group = 64;
  j.quant_zero_points = true;
  const MoeSpec back = MoeSpec::from_json(j.to_json());
  CHECK(back.quant == kQuantInt4Group);
  CHECK(back.quant_group == 64);
  CHECK(back.quant_zero_points);
  nlohmann::json bad = j.to_json();
  bad["quant"] = "nf4";
  CHECK_THROWS_WITH_AS(MoeSpec::from_json(bad), doctest::Contains("unknown quantization 'nf4'"), Error);
  // fp8 needs e4m3 mma: an sm_80 kernel spec is refused with the reason.
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(quant_spec(kQuantFp8Block), MoeTileConfig{}, "sm_80"),
                       doctest::Contains("sm_89 or newer"), Error);
}

namespace {
// Well-formed quantized arguments with fake device addresses: check() never touches them.
MoeForwardArgs fake_quant_args(const MoeLayer& layer, int m) {
  MoeDevicePointers p;
  CUdeviceptr next = 0x10000000;
  auto addr = [&]() { return next += 0x1000000; };
  p.hidden = addr();
  p.router_logits = addr();
  p.w1 = addr();
  p.w2 = addr();
  p.w1_scale = addr();
  p.w2_scale = addr();
  if (layer.spec().quant_zero_points) {
    p.w1_zero = addr();
    p.w2_zero = addr();
  }
  if (layer.spec().quant == kQuantFp8Tensor) {
    p.a1_scale = addr();
    p.a2_scale = addr();
  }
  p.out = addr();
  p.workspace = addr();
  p.workspace_size = layer.workspace_bytes(m);
  return contiguous_moe_args(layer.spec(), m, p);
}
std::string check_error(const MoeLayer& layer, const MoeForwardArgs& a) { return layer_check_error(layer, a); }
}  // namespace

TEST_CASE("quant: malformed quantized inputs are rejected before any launch (no GPU needed)") {
  Runtime rt(test_options(""));
  const int m = 17;
  for (MoeQuant q : {kQuantInt8Channel, kQuantInt4Group, kQuantMxfp4, kQuantFp8Block, kQuantFp8Channel, kQuantFp8Tensor}) {
    MoeSpec s = quant_spec(q);
    s.quant_zero_points = q == kQuantInt4Group;
    MoeLayer layer(rt, s);
    INFO(quant_name(q));
    CHECK(check_error(layer, fake_quant_args(layer, m)) == "");
    MoeForwardArgs a = fake_quant_args(layer, m);
    a.w1_scale.shape[a.w1_scale.rank - 1] += 1;  // scale tensor of the wrong shape
    CHECK(check_error(layer, a).find("w1_scale") != std::string::npos);
    a = fake_quant_args(layer, m);
    a.w2_scale = TensorView{};
    CHECK(check_error(layer, a).find("w2_scale is required") != std::string::npos);
    a = fake_quant_args(layer, m);
    a.w1.dtype = ScalarType::BF16;  // unquantized weights given to a quantized layer
    CHECK(check_error(layer, a).find("dtype must be") != std::string::npos);
    if (quant_weight_bits(q) == 4) {  // unpacked: K bytes per row instead of K / 2
      a = fake_quant_args(layer, m);
      a.w2.shape[2] *= 2;
      a.w2.strides[1] *= 2;
      a.w2.strides[0] *= 2;
      CHECK(check_error(layer, a).find("w2 u8") != std::string::npos);
    }
    if (q == kQuantFp8Tensor) {
      a = fake_quant_args(layer, m);
      a.a2_scale = TensorView{};
      CHECK(check_error(layer, a).find("a2_scale is required") != std::string::npos);
    } else {
      a = fake_quant_args(layer, m);
      a.a1_scale = TensorView::contiguous(0x1000, ScalarType::F32, {1});
      CHECK(check_error(layer, a).find("fp8_tensor only") != std::string::npos);
    }
  }
  // Zero points without quant_zero_points, and the opposite.
  MoeSpec sym = quant_spec(kQuantInt4Group);
  MoeLayer sym_layer(rt, sym);
  MoeForwardArgs a = fake_quant_args(sym_layer, m);
  a.w1_zero = a.w1_scale;
  a.w1_zero.dtype = ScalarType::U8;
  CHECK(check_error(sym_layer, a).find("no zero points") != std::string::npos);
  // A bf16 layer refuses scales it would ignore.
  MoeSpec plain = quant_spec(kQuantNone);
  MoeLayer plain_layer(rt, plain);
  a = fake_quant_args(plain_layer, m);
  a.w1_scale = TensorView::contiguous(0x1000, ScalarType::F32, {4, 256});
  CHECK(check_error(plain_layer, a).find("has no weight scales") != std::string::npos);
}

TEST_CASE("quant: GPTQ int4 checkpoints prepack into the int4_group layout") {
  const std::int64_t in = 64, out = 16;
  const int group = 32;
  std::vector<std::uint32_t> qweight(in / 8 * out), qzeros(in / group * out / 8);
  std::vector<std::uint16_t> scales(in / group * out);
  std::uint32_t x = 12345;
  auto next = [&] { return x = x * 1664525u + 1013904223u; };
  for (auto& w : qweight) w = next();
  for (auto& z : qzeros) z = next();
  for (auto& sc : scales) sc = float_to_f16_bits(0.01f + float(next() % 100) * 1e-4f);
  const Int4Prepacked p = prepack_gptq_int4(qweight.data(), scales.data(), qzeros.data(), in, out, group, 1);
  // Every weight decodes alike from both layouts: GPTQ (q - (z + 1)) * s and moejit (q - z') * s'.
  for (std::int64_t n = 0; n < out; ++n)
    for (std::int64_t k = 0; k < in; ++k) {
      const int q_gptq = (qweight[(k / 8) * out + n] >> (4 * (k % 8))) & 15;
      const int z_gptq = ((qzeros[(k / group) * (out / 8) + n / 8] >> (4 * (n % 8))) & 15) + 1;
      const float s_gptq = f16_bits_to_float(scales[(k / group) * out + n]);
      const int q = (p.weights[n * (in / 2) + k / 2] >> (4 * (k % 2))) & 15;
      const int z = p.zeros[n * (in / group) + k / group];
      const float sc = f16_bits_to_float(p.scales[n * (in / group) + k / group]);
      INFO("n " << n << " k " << k);
      CHECK(float(q - z) * sc == float(q_gptq - z_gptq) * s_gptq);
    }
  CHECK_THROWS_WITH_AS(prepack_gptq_int4(qweight.data(), scales.data(), nullptr, in, out, 48, 0),
                       doctest::Contains("does not divide"), Error);
  CHECK(prepack_gptq_int4(qweight.data(), scales.data(), nullptr, in, out, group, 0).zeros.empty());
}

TEST_CASE("quant: symmetric per-column 8-bit GPTQ checkpoints prepack into the int8_channel layout") {
  const std::int64_t in = 24, out = 8;
  std::vector<std::uint32_t> qweight(in / 4 * out), qzeros(out / 4, 0x7f7f7f7fu);  // v1: zero 128 stored as 127
  std::vector<std::uint16_t> scales(out);
  std::uint32_t x = 777;
  auto next = [&] { return x = x * 1664525u + 1013904223u; };
  for (auto& w : qweight) w = next();
  for (auto& sc : scales) sc = float_to_bf16_bits(0.02f + float(next() % 64) * 1e-3f);
  const Int8Prepacked p = prepack_gptq_int8(qweight.data(), scales.data(), qzeros.data(), in, out, 0, 1);
  REQUIRE(p.weights.size() == std::size_t(in * out));
  for (std::int64_t n = 0; n < out; ++n) {
    CHECK(p.scales[n] == bf16_bits_to_float(scales[n]));
    for (std::int64_t k = 0; k < in; ++k) {
      const int q_gptq = static_cast<int>((qweight[(k / 4) * out + n] >> (8 * (k % 4))) & 255u);
      INFO("n " << n << " k " << k);
      CHECK(int(p.weights[n * in + k]) == q_gptq - 128);  // GPTQ: (q - 128) * s; int8_channel: w * s
    }
  }
  CHECK(prepack_gptq_int8(qweight.data(), scales.data(), nullptr, in, out, 0, 1).weights == p.weights);
  qzeros[1] = 0x7f7f807fu;  // column 5 (word 1, byte 1) at zero point 129
  CHECK_THROWS_WITH_AS(prepack_gptq_int8(qweight.data(), scales.data(), qzeros.data(), in, out, 0, 1),
                       doctest::Contains("column 5 has zero point 129"), Error);
  CHECK_THROWS_WITH_AS(prepack_gptq_int8(qweight.data(), scales.data(), nullptr, 22, out, 0, 1),
                       doctest::Contains("multiples of 4"), Error);
}

TEST_CASE("quant: compressed-tensors int4 zero points unpack into the int4_group layout") {
  // 12 output rows (two words per group, the second half used), 3 groups; zero of (n, g) = (n + 2 g) % 16.
  const std::int64_t out = 12, groups = 3;
  std::vector<std::uint32_t> packed(2 * groups, 0);
  for (std::int64_t n = 0; n < out; ++n)
    for (std::int64_t g = 0; g < groups; ++g)
      packed[(n / 8) * groups + g] |= std::uint32_t((n + 2 * g) % 16) << (4 * (n % 8));
  const auto zeros = unpack_compressed_int4_zero_points(packed.data(), out, groups);
  REQUIRE(zeros.size() == std::size_t(out * groups));
  for (std::int64_t n = 0; n < out; ++n)
    for (std::int64_t g = 0; g < groups; ++g) CHECK(int(zeros[n * groups + g]) == (n + 2 * g) % 16);
  CHECK_THROWS_WITH_AS(unpack_compressed_int4_zero_points(packed.data(), 0, groups), doctest::Contains("positive"), Error);
}

TEST_CASE("quant: prepacked MXFP4 words decode pair by pair to the checkpoint's values") {
  // The stored positions are a permutation of the word's 32 bits.
  unsigned seen = 0;
  for (int j = 0; j < 8; ++j)
    for (int b = 0; b < 4; ++b) seen |= 1u << mxfp4_packed_bit(j, b);
  CHECK(seen == 0xffffffffu);
  // Every word: each pair's decode (the kernels' instructions) gives both codes at the bf16 bits
  // 6-8 (magnitude) and 15 (sign), which read as the e2m1 value times 2^-126.
  std::uint64_t state = 7;
  for (int n = 0; n < 20000; ++n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const unsigned w = n < 16 ? 0x11111111u * unsigned(n) : unsigned(state >> 32);
    const unsigned packed = mxfp4_pack_word(w);
    for (int p = 0; p < 4; ++p) {
      const unsigned v = mxfp4_packed_pair(packed, p);
      for (int lane = 0; lane < 2; ++lane) {
        const unsigned code = (w >> (4 * (2 * p + lane))) & 15u;
        const unsigned bits = (v >> (16 * lane)) & 0xffffu;
        INFO("word " << w << " pair " << p << " lane " << lane);
        REQUIRE(bits == (((code & 7u) << 6) | ((code & 8u) << 12)));
        float f;
        const std::uint32_t f32 = bits << 16;
        std::memcpy(&f, &f32, 4);
        CHECK(std::ldexp(double(f), 126) == double(e2m1_to_float(std::uint8_t(code))));
        CHECK(mxfp4_packed_code(packed, 2 * p + lane) == code);
      }
    }
  }
  // prepack_mxfp4 packs every word in place (little-endian), and refuses partial words.
  std::vector<std::uint8_t> bytes(4096);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::uint8_t(i * 37 + 11);
  std::vector<std::uint8_t> packed = bytes;
  prepack_mxfp4(packed.data(), packed.size());
  for (std::size_t i = 0; i < bytes.size(); i += 4) {
    std::uint32_t a, b;
    std::memcpy(&a, &bytes[i], 4);
    std::memcpy(&b, &packed[i], 4);
    REQUIRE(b == mxfp4_pack_word(a));
  }
  CHECK_THROWS_WITH_AS(prepack_mxfp4(packed.data(), 6), doctest::Contains("whole 32-bit words"), Error);
  // The spec takes the name, with MXFP4's shape rules.
  MoeSpec s = quant_spec(kQuantMxfp4Packed);
  CHECK(parse_quant("mxfp4_packed") == kQuantMxfp4Packed);
  CHECK_NOTHROW(s.validate());
  s.hidden = 272;  // not a multiple of 32
  CHECK_THROWS_WITH_AS(s.validate(), doctest::Contains("multiples of 32"), Error);
}

TEST_CASE("quant: Hugging Face quantization_config picks the expert format") {
  auto spec_of = [](const char* quantization) {
    nlohmann::json j = {{"model_type", "deepseek_v3"}, {"n_routed_experts", 64}, {"num_experts_per_tok", 8},
                        {"hidden_size", 2048}, {"moe_intermediate_size", 1024}};
    j["quantization_config"] = nlohmann::json::parse(quantization);
    return ModelMoeConfig::from_json(j).moe_spec();
  };
  CHECK(spec_of(R"({"quant_method": "mxfp4"})").quant == kQuantMxfp4);
  CHECK(spec_of(R"({"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"})").quant ==
        kQuantFp8Block);
  CHECK(spec_of(R"({"quant_method": "fp8", "activation_scheme": "static"})").quant == kQuantFp8Tensor);
  CHECK(spec_of(R"({"quant_method": "fp8", "activation_scheme": "dynamic"})").quant == kQuantFp8Channel);
  const MoeSpec gptq = spec_of(R"({"quant_method": "gptq", "bits": 4, "group_size": 64, "sym": true})");
  CHECK(gptq.quant == kQuantInt4Group);
  CHECK(gptq.quant_group == 64);
  CHECK(!gptq.quant_zero_points);
  const MoeSpec awq = spec_of(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true})");
  CHECK(awq.quant == kQuantInt4Group);
  CHECK(awq.quant_zero_points);
  // 4-bit GPTQ with group_size -1: one scale (and zero point) per weight row.
  const MoeSpec gptq_rows = spec_of(R"({"quant_method": "gptq", "bits": 4, "group_size": -1, "sym": false})");
  CHECK(gptq_rows.quant == kQuantInt4Group);
  CHECK(gptq_rows.quant_group == kQuantGroupPerRow);
  CHECK(gptq_rows.quant_zero_points);
  CHECK(gptq_rows.unsupported().empty());
  CHECK_THROWS_WITH_AS(spec_of(R"({"quant_method": "bitsandbytes"})"), doctest::Contains("'bitsandbytes' is not supported"),
                       Error);
  CHECK_THROWS_WITH_AS(spec_of(R"({"quant_method": "fp8", "weight_block_size": [64, 64]})"),
                       doctest::Contains("is not [128, 128]"), Error);
  CHECK_THROWS_WITH_AS(spec_of(R"({"quant_method": "gptq", "bits": 8})"), doctest::Contains("8 bits, group_size 128"),
                       Error);
  // 8-bit GPTQ with one symmetric scale per output column is int8_channel; other 8-bit forms are refused.
  CHECK(spec_of(R"({"quant_method": "gptq", "bits": 8, "group_size": -1, "sym": true})").quant == kQuantInt8Channel);
  CHECK_THROWS_WITH_AS(spec_of(R"({"quant_method": "gptq", "bits": 8, "group_size": -1, "sym": false})"),
                       doctest::Contains("sym false"), Error);
  CHECK_THROWS_WITH_AS(spec_of(R"({"quant_method": "gptq", "bits": 3})"), doctest::Contains("3 bits"), Error);
  CHECK_THROWS_WITH_AS(spec_of(R"({"quant_method": "awq", "bits": 8})"), doctest::Contains("8 bits (int4_group takes 4)"),
                       Error);
  // compressed-tensors (llm-compressor): the group's weight and input-activation arguments.
  auto ct = [&](const char* weights, const char* acts) {
    return spec_of(fmt::format(R"({{"quant_method": "compressed-tensors", "format": "float-quantized",
                                   "config_groups": {{"group_0": {{"targets": ["Linear"], "weights": {},
                                   "input_activations": {}}}}}, "ignore": ["lm_head"]}})",
                               weights, acts)
                       .c_str());
  };
  const char* fp8_token = R"({"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true, "symmetric": true})";
  CHECK(ct(R"({"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true, "dynamic": false})", fp8_token)
            .quant == kQuantFp8Channel);
  CHECK(ct(R"({"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": true})", fp8_token).quant ==
        kQuantFp8Channel);
  CHECK(ct(R"({"num_bits": 8, "type": "float", "strategy": "tensor"})",
           R"({"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": false})")
            .quant == kQuantFp8Tensor);
  CHECK(ct(R"({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]})",
           R"({"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128, "dynamic": true})")
            .quant == kQuantFp8Block);
  const MoeSpec w4 = ct(R"({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 64, "symmetric": false})",
                        "null");
  CHECK(w4.quant == kQuantInt4Group);
  CHECK(w4.quant_group == 64);
  CHECK(w4.quant_zero_points);
  const MoeSpec w4_rows = ct(R"({"num_bits": 4, "type": "int", "strategy": "channel", "symmetric": true})", "null");
  CHECK(w4_rows.quant == kQuantInt4Group);
  CHECK(w4_rows.quant_group == kQuantGroupPerRow);
  CHECK(!w4_rows.quant_zero_points);
  CHECK_THROWS_WITH_AS(ct(R"({"num_bits": 4, "type": "int", "strategy": "tensor", "symmetric": true})", "null"),
                       doctest::Contains("or per channel"), Error);
  CHECK(ct(R"({"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": true})", "null").quant ==
        kQuantInt8Channel);
  CHECK_THROWS_WITH_AS(ct(R"({"num_bits": 8, "type": "float", "strategy": "channel"})", "null"),
                       doctest::Contains("w8a16"), Error);
  CHECK_THROWS_WITH_AS(ct(R"({"num_bits": 8, "type": "float", "strategy": "channel"})",
                          R"({"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": false})"),
                       doctest::Contains("static activations per tensor: no moejit format"), Error);
  CHECK_THROWS_WITH_AS(ct(R"({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]})",
                          fp8_token),
                       doctest::Contains("per token per 128 k"), Error);
  CHECK_THROWS_WITH_AS(ct(R"({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16})",
                          R"({"num_bits": 4, "type": "float", "strategy": "tensor_group", "dynamic": "local"})"),
                       doctest::Contains("NVFP4"), Error);
  // MXFP4 (mxfp4-pack-quantized): moejit's mxfp4 layout, 16-bit activations.
  CHECK(ct(R"({"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32, "scale_dtype": "torch.uint8"})",
           "null")
            .quant == kQuantMxfp4);
  CHECK_THROWS_WITH_AS(ct(R"({"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32})",
                          R"({"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32, "dynamic": true})"),
                       doctest::Contains("w4a4"), Error);
  CHECK(spec_of(R"({"quant_method": "mxfp4", "format": "mxfp4-pack-quantized",
                    "config_groups": {"group_0": {"weights": {"group_size": 32, "num_bits": 4}}}})")
            .quant == kQuantMxfp4);
  CHECK_THROWS_WITH_AS(ct(R"({"num_bits": 8, "type": "int", "strategy": "channel"})",
                          R"({"num_bits": 8, "type": "int", "strategy": "token", "dynamic": true})"),
                       doctest::Contains("weight-only"), Error);
  CHECK_THROWS_WITH_AS(ct(R"({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "actorder": "group"})",
                          "null"),
                       doctest::Contains("actorder 'group'"), Error);
  CHECK_THROWS_WITH_AS(spec_of(R"({"quant_method": "compressed-tensors", "config_groups": {
                                    "a": {"weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}},
                                    "b": {"weights": {"num_bits": 8, "type": "int", "strategy": "channel"}}}})"),
                       doctest::Contains("quantize differently"), Error);
  // Null fields read as absent (real configs write them), a field of the wrong type is named.
  CHECK(spec_of(R"({"quant_method": "fp8", "weight_block_size": null, "activation_scheme": "dynamic"})").quant ==
        kQuantFp8Channel);
  CHECK(ct(R"({"num_bits": 8, "type": "float", "strategy": "channel", "group_size": null, "block_structure": null,
               "actorder": null, "dynamic": false, "observer": "minmax"})",
           R"({"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true, "group_size": null})")
            .quant == kQuantFp8Channel);
  CHECK(ct(R"({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": "128x128"})",
           R"({"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128, "dynamic": true})")
            .quant == kQuantFp8Block);
  // The "RxC" string whole: trailing text is not read as [128, 128].
  for (const char* text : {"128x128x", "128x128 ", "128x128x64", "128"})
    CHECK_THROWS_WITH_AS(ct(fmt::format(R"({{"num_bits": 8, "type": "float", "strategy": "block", "block_structure": "{}"}})",
                                        text).c_str(),
                            R"({"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128, "dynamic": true})"),
                         doctest::Contains("fp8_block takes blocks of [128, 128]"), Error);
  CHECK_THROWS_WITH_AS(spec_of(R"({"quant_method": "gptq", "bits": "four"})"),
                       doctest::Contains("field bits = \"four\" has the wrong type"), Error);
  CHECK(spec_of(R"({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0})").quant == kQuantFp8Channel);
  CHECK(spec_of(R"({"quant_method": "modelopt", "quant_algo": "FP8"})").quant == kQuantFp8Tensor);
  CHECK(spec_of(R"({"quant_method": "modelopt", "quant_algo": "FP8_PER_CHANNEL_PER_TOKEN"})").quant ==
        kQuantFp8Channel);
  CHECK_THROWS_WITH_AS(spec_of(R"({"quant_method": "modelopt", "quant_algo": "NVFP4"})"),
                       doctest::Contains("modelopt quant_algo 'NVFP4'"), Error);
  // No quantization_config: 16-bit experts, as before.
  nlohmann::json plain = {{"model_type", "qwen3_moe"}, {"num_experts", 128}, {"num_experts_per_tok", 8},
                          {"hidden_size", 2048}, {"moe_intermediate_size", 768}};
  CHECK(ModelMoeConfig::from_json(plain).moe_spec().quant == kQuantNone);
}

TEST_CASE("quant: AWQ int4 checkpoints prepack into the int4_group layout") {
  const std::int64_t in = 64, out = 24;
  const int group = 32;
  static const int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // AWQ: nibble i holds column 8j + kOrder[i]
  std::vector<int> q(in * out), z(in / group * out);
  std::uint32_t x = 777;
  auto next = [&] { return x = x * 1664525u + 1013904223u; };
  for (auto& v : q) v = int(next() >> 28);
  for (auto& v : z) v = int(next() >> 28);
  std::vector<std::uint32_t> qweight(in * out / 8, 0), qzeros(in / group * out / 8, 0);
  for (std::int64_t k = 0; k < in; ++k)
    for (std::int64_t j = 0; j < out / 8; ++j)
      for (int i = 0; i < 8; ++i) qweight[k * (out / 8) + j] |= std::uint32_t(q[k * out + 8 * j + kOrder[i]]) << (4 * i);
  for (std::int64_t g = 0; g < in / group; ++g)
    for (std::int64_t j = 0; j < out / 8; ++j)
      for (int i = 0; i < 8; ++i) qzeros[g * (out / 8) + j] |= std::uint32_t(z[g * out + 8 * j + kOrder[i]]) << (4 * i);
  std::vector<std::uint16_t> scales(in / group * out);
  for (auto& sc : scales) sc = float_to_f16_bits(0.02f + float(next() % 50) * 1e-3f);
  const Int4Prepacked p = prepack_awq_int4(qweight.data(), scales.data(), qzeros.data(), in, out, group);
  for (std::int64_t n = 0; n < out; ++n)
    for (std::int64_t k = 0; k < in; ++k) {
      INFO("n " << n << " k " << k);
      CHECK(((p.weights[n * (in / 2) + k / 2] >> (4 * (k % 2))) & 15) == q[k * out + n]);
      CHECK(p.zeros[n * (in / group) + k / group] == z[(k / group) * out + n]);
      CHECK(p.scales[n * (in / group) + k / group] == scales[(k / group) * out + n]);
    }
  CHECK_THROWS_WITH_AS(prepack_awq_int4(qweight.data(), scales.data(), nullptr, in, out, group),
                       doctest::Contains("zero points"), Error);
}
