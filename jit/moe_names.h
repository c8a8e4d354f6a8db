// Spellings of the MoE enums shared by kernel specs, MoeSpec, the CLI and model configs.
#pragma once

#include <string>
#include <vector>

namespace moejit {

// Activation codes are MoeActivation (templates/moe/activation_kinds.cuh).
const char* activation_name(int code);          // silu_mul, gelu_mul, gelu_tanh_mul, swigluoai, ...
int parse_activation(const std::string& name);  // throws Error(Validate) listing the known names
std::vector<std::string> activation_names();
// Dtype codes are MoeDType (templates/common/mma_sm80.cuh).
const char* dtype_name(int code);               // bf16, f16
int parse_dtype(const std::string& name);       // bf16/bfloat16, f16/fp16/float16
// Quantization codes are MoeQuant (templates/moe/quant_kinds.cuh).
const char* quant_name(int code);               // none, int8_channel, int4_group, mxfp4, fp8_block, ...
int parse_quant(const std::string& name);       // throws Error(Validate) listing the known names
std::vector<std::string> quant_names();
// Architectures with e4m3 mma.sync (sm_89 and newer).
int arch_number(const std::string& arch);  // sm_90a -> 90
bool arch_has_fp8_mma(const std::string& arch);
bool arch_has_dependent_launch(const std::string& arch);  // programmatic dependent launch: sm_90+
bool arch_has_wgmma(const std::string& arch);  // warpgroup MMA: sm_90a only (not sm_90, not sm_100a)

}  // namespace moejit
