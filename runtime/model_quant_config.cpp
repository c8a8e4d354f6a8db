#include "runtime/model_quant_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <vector>

#include "common/error.h"
#include "runtime/json_fields.h"
#include "templates/moe/quant_kinds.cuh"

namespace moejit {

namespace {
[[noreturn]] void refuse(const std::string& why) { throw Error(Phase::Validate, "model config: " + why); }

// j[key] as T: `fallback` where the key is missing or null, an error naming the field where it has
// another type (json_fields.h).
template <typename T>
T field(const nlohmann::json& j, const char* key, T fallback) {
  return typed_field<T>(j, {key}, "model config: quantization_config").value_or(fallback);
}

ExpertQuant fp8_method(const nlohmann::json& q) {
  const auto block = field(q, "weight_block_size", std::vector<int>{});
  if (!block.empty()) {
    if (block != std::vector<int>{kQuantFp8BlockSize, kQuantFp8BlockSize})
      refuse(fmt::format("fp8 weight_block_size [{}] is not [128, 128]", fmt::join(block, ", ")));
    return {"fp8_block"};
  }
  // Per-tensor weight scales with dynamic activations: fp8_channel with the scale given per row, repeated.
  return {field(q, "activation_scheme", std::string("dynamic")) == "static" ? "fp8_tensor" : "fp8_channel"};
}

ExpertQuant gptq_awq_method(const nlohmann::json& q, const std::string& method) {
  const int bits = field(q, "bits", field(q, "w_bit", 4));
  // Act-order GPTQ: a column's scale group is g_idx[k], not k / group_size; the kernels read
  // consecutive k per group (no g_idx, no column permutation), so it is refused, not misread.
  if (method == "gptq" && field(q, "desc_act", false))
    refuse("gptq with desc_act (act-order: scale groups by g_idx, not by consecutive k) is not supported; quantize "
           "without act-order");
  // 8-bit GPTQ, symmetric with one scale per output column (group_size -1): int8_channel (its
  // weights are the codes - 128, prepack_gptq_int8). Groups or zero points have no int8 format.
  if (method == "gptq" && bits == 8) {
    const int group = field(q, "group_size", 128);
    const bool sym = field(q, "sym", true);
    if (group != -1 || !sym)
      refuse(fmt::format("gptq with 8 bits, group_size {}{}: moejit's int8 experts (int8_channel) take one scale per "
                         "output column and no zero points (group_size -1, sym true)",
                         group, sym ? "" : ", sym false"));
    return {"int8_channel"};
  }
  if (bits != 4)
    refuse(fmt::format("{} with {} bits (int4_group takes 4{})", method, bits,
                       method == "gptq" ? "; int8_channel 8 with group_size -1 and sym" : ""));
  ExpertQuant e{"int4_group"};
  e.group = field(q, "group_size", field(q, "q_group_size", 128));
  e.zero_points = method == "awq" ? field(q, "zero_point", true) : !field(q, "sym", true);
  return e;
}

// compressed-tensors (llm-compressor): config_groups of QuantizationArgs for weights and input
// activations. The experts' group is the only one, or every group has the same scheme.
ExpertQuant compressed_tensors_method(const nlohmann::json& q) {
  if (const auto it = q.find("sparsity_config"); it != q.end() && it->is_object() && !it->empty()) {
    const std::string format = field(*it, "format", std::string("dense"));
    if (format != "dense") refuse(fmt::format("compressed-tensors sparsity format '{}' is not supported (dense only)", format));
  }
  const auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->empty())
    refuse("compressed-tensors without config_groups: no weight scheme to read");
  const nlohmann::json& g = groups->begin().value();
  for (const auto& [name, other] : groups->items())
    if (field(other, "weights", nlohmann::json()) != field(g, "weights", nlohmann::json()) ||
        field(other, "input_activations", nlohmann::json()) != field(g, "input_activations", nlohmann::json()))
      refuse(fmt::format("compressed-tensors config_groups '{}' and '{}' quantize differently; which one the experts "
                         "use depends on module names moejit does not see (give the format explicitly, --quant)",
                         groups->begin().key(), name));
  const nlohmann::json w = field(g, "weights", nlohmann::json());
  if (!w.is_object()) refuse("compressed-tensors config group without weights: the experts are not quantized by it");
  const nlohmann::json a = field(g, "input_activations", nlohmann::json());
  const std::string type = field(w, "type", std::string("int")), strategy = field(w, "strategy", std::string("tensor"));
  const int bits = field(w, "num_bits", 8);
  const bool symmetric = field(w, "symmetric", true);
  if (const auto order = w.find("actorder"); order != w.end() && order->is_string() && *order == "group")
    refuse("compressed-tensors weights with actorder 'group' (scale groups by g_idx, not by consecutive k) are not "
           "supported");
  const std::string scheme = fmt::format("{} {}-bit weights per {}", type, bits, strategy);
  if (type == "float") {
    // fp4: MXFP4 (groups of 32 with e8m0 scales, "mxfp4-pack-quantized": e2m1 codes two per byte,
    // the low nibble the even k, and u8 scales [out, in / 32], moejit's mxfp4 layout as it is) with
    // 16-bit activations. NVFP4 (fp8 scales per 16 and a global scale) has no moejit format.
    if (bits == 4) {
      const std::string format = field(g, "format", field(q, "format", std::string()));
      if (strategy != "group" || field(w, "group_size", 0) != 32 || format == "nvfp4-pack-quantized")
        refuse(scheme + ": fp4 other than MXFP4 (groups of 32 k, e8m0 scales), e.g. NVFP4 (fp8 scales per 16 k), "
                        "has no moejit format");
      if (a.is_object())
        refuse(scheme + " with quantized activations (w4a4): moejit's mxfp4 keeps the activations in 16 bits (w4a16)");
      return {"mxfp4"};
    }
    if (bits != 8 || !symmetric) refuse(scheme + (symmetric ? "" : ", asymmetric") + ": moejit's fp8 formats are e4m3, symmetric");
    if (!a.is_object())
      refuse(scheme + " without quantized activations (w8a16): moejit's fp8 formats quantize the activations too (w8a8)");
    const bool dynamic = field(a, "dynamic", nlohmann::json(false)) == nlohmann::json(true);  // "local": not dynamic per token
    const std::string a_strategy = field(a, "strategy", std::string("tensor"));
    const int a_group = field(a, "group_size", 0);
    if (field(a, "type", std::string("float")) != "float" || field(a, "num_bits", 8) != 8)
      refuse(scheme + ": its activations are not fp8, as moejit's w8a8 formats quantize them");
    const std::string act = fmt::format("{} activations per {}", dynamic ? "dynamic" : "static", a_strategy);
    if (strategy == "block") {
      // [128, 128], or "128x128" as older compressed-tensors versions wrote it.
      std::vector<int> block;
      if (const auto it = w.find("block_structure"); it != w.end() && it->is_string()) {
        // The whole string: "128x128x" or "128x128 " is refused, not read as [128, 128].
        const std::string text = it->get<std::string>();
        int r = 0, c = 0, used = 0;
        if (std::sscanf(text.c_str(), "%dx%d%n", &r, &c, &used) == 2 && used == static_cast<int>(text.size()))
          block = {r, c};
      } else {
        block = field(w, "block_structure", std::vector<int>{});
      }
      if (block != std::vector<int>{kQuantFp8BlockSize, kQuantFp8BlockSize})
        refuse(fmt::format("{} of [{}]: fp8_block takes blocks of [128, 128]", scheme, fmt::join(block, ", ")));
      if (!dynamic || a_strategy != "group" || a_group != kQuantFp8BlockSize)
        refuse(fmt::format("{} with {}: fp8_block quantizes activations dynamically per token per 128 k", scheme, act));
      return {"fp8_block"};
    }
    if ((strategy == "channel" || strategy == "tensor") && dynamic && a_strategy == "token") return {"fp8_channel"};
    if (strategy == "tensor" && !dynamic && a_strategy == "tensor") return {"fp8_tensor"};
    refuse(fmt::format("{} with {}: no moejit format (fp8_channel: weights per channel or tensor, dynamic activations "
                       "per token; fp8_tensor: both per tensor, static activations)",
                       scheme, act));
  }
  if (type != "int") refuse(fmt::format("compressed-tensors weight type '{}' is not int or float", type));
  if (a.is_object())
    refuse(fmt::format("{} with quantized activations (w{}a{}): moejit's integer formats are weight-only", scheme, bits,
                       field(a, "num_bits", 8)));
  if (bits == 4) {
    if (strategy != "group" && strategy != "channel")
      refuse(scheme + ": int4_group takes scales per group of 32, 64 or 128 k, or per channel");
    ExpertQuant e{"int4_group"};
    // MoeSpec::validate names a group it does not take.
    e.group = strategy == "channel" ? kQuantGroupPerRow : field(w, "group_size", 0);
    e.zero_points = !symmetric;
    return e;
  }
  if (bits == 8 && strategy == "channel" && symmetric) return {"int8_channel"};
  refuse(scheme + (symmetric ? "" : ", asymmetric") +
         ": moejit's integer formats are int4_group (4 bits per group) and int8_channel (8 bits per channel, symmetric)");
}
}  // namespace

ExpertQuant expert_quant_from_config(const nlohmann::json& q) {
  const std::string method = field(q, "quant_method", std::string());
  if (method == "mxfp4") return {"mxfp4"};
  if (method == "fp8") return fp8_method(q);
  if (method == "gptq" || method == "awq") return gptq_awq_method(q, method);
  if (method == "compressed-tensors") return compressed_tensors_method(q);
  // fbgemm_fp8 (Llama-4 FP8): e4m3 weights per output channel, activations per token, dynamic.
  if (method == "fbgemm_fp8") return {"fp8_channel"};
  // NVIDIA ModelOpt: FP8 is per-tensor weight and static per-tensor input scales (fp8_tensor);
  // FP8_PER_CHANNEL_PER_TOKEN is fp8_channel. Its fp4 and int4 algorithms have no moejit format.
  if (method == "modelopt") {
    const std::string algo = field(q, "quant_algo", std::string());
    if (algo == "FP8") return {"fp8_tensor"};
    if (algo == "FP8_PER_CHANNEL_PER_TOKEN") return {"fp8_channel"};
    refuse(fmt::format("modelopt quant_algo '{}' is not supported (FP8, FP8_PER_CHANNEL_PER_TOKEN)", algo));
  }
  refuse(fmt::format("quantization_config quant_method '{}' is not supported (mxfp4, fp8, gptq, awq, "
                     "compressed-tensors, fbgemm_fp8, modelopt)",
                     method));
}

}  // namespace moejit
