#include "jit/moe_names.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <utility>

#include "common/error.h"
#include "templates/common/dtype_kinds.cuh"
#include "templates/moe/activation_kinds.cuh"
#include "templates/moe/quant_kinds.cuh"

namespace moejit {

namespace {
const std::pair<int, const char*> kActivations[] = {
    {kActNone, "none"},         {kActSiluMul, "silu_mul"},   {kActGeluMul, "gelu_mul"},
    {kActGeluTanhMul, "gelu_tanh_mul"}, {kActSwigluOai, "swigluoai"}, {kActSwigluStep, "swiglustep"},
    {kActSilu, "silu"},         {kActGelu, "gelu"},          {kActGeluTanh, "gelu_tanh"},
    {kActRelu2, "relu2"},
};
const std::pair<int, const char*> kQuants[] = {
    {kQuantNone, "none"},           {kQuantInt8Channel, "int8_channel"}, {kQuantInt4Group, "int4_group"},
    {kQuantMxfp4, "mxfp4"},         {kQuantFp8Block, "fp8_block"},       {kQuantFp8Channel, "fp8_channel"},
    {kQuantFp8Tensor, "fp8_tensor"},     {kQuantMxfp4Packed, "mxfp4_packed"},
};
}  // namespace

const char* quant_name(int code) {
  for (const auto& [c, name] : kQuants)
    if (c == code) return name;
  throw Error(Phase::Validate, fmt::format("unknown quantization code {}", code));
}

std::vector<std::string> quant_names() {
  std::vector<std::string> out;
  for (const auto& q : kQuants) out.push_back(q.second);
  return out;
}

int parse_quant(const std::string& name) {
  for (const auto& [c, n] : kQuants)
    if (name == n) return c;
  throw Error(Phase::Validate, fmt::format("unknown quantization '{}' (known: {})", name, fmt::join(quant_names(), ", ")));
}

int arch_number(const std::string& arch) {
  // sm_<major><minor>[a|f]; validated elsewhere. 89 = Ada, 90 = Hopper, 100+ = Blackwell.
  int number = 0;
  for (std::size_t i = 3; i < arch.size() && arch[i] >= '0' && arch[i] <= '9'; ++i) number = number * 10 + (arch[i] - '0');
  return number;
}

bool arch_has_fp8_mma(const std::string& arch) { return arch_number(arch) >= 89; }

bool arch_has_dependent_launch(const std::string& arch) { return arch_number(arch) >= 90; }

bool arch_has_wgmma(const std::string& arch) { return arch == "sm_90a"; }

const char* activation_name(int code) {
  for (const auto& [c, name] : kActivations)
    if (c == code) return name;
  throw Error(Phase::Validate, fmt::format("unknown activation code {}", code));
}

std::vector<std::string> activation_names() {
  std::vector<std::string> out;
  for (const auto& a : kActivations) out.push_back(a.second);
  return out;
}

int parse_activation(const std::string& name) {
  for (const auto& [c, n] : kActivations)
    if (name == n) return c;
  throw Error(Phase::Validate, fmt::format("unknown activation '{}' (known: {})", name,
                                           fmt::join(activation_names(), ", ")));
}

const char* dtype_name(int code) {
  if (code == kDTypeBF16) return "bf16";
  if (code == kDTypeF16) return "f16";
  throw Error(Phase::Validate, fmt::format("unknown dtype code {}", code));
}

int parse_dtype(const std::string& name) {
  if (name == "bf16" || name == "bfloat16") return kDTypeBF16;
  if (name == "f16" || name == "fp16" || name == "float16") return kDTypeF16;
  throw Error(Phase::Validate, fmt::format("unknown dtype '{}' (bf16, f16)", name));
}

}  // namespace moejit
