// Helpers that describe kernel-family parameters (families.cpp, families_moe.cpp), and the
// families defined outside families.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "jit/families.h"

namespace moejit {

ParamDesc int_param(std::string name, std::string tname, std::string doc, std::optional<std::int64_t> def,
                    std::int64_t min, std::int64_t max);
ParamDesc derived_int(std::string name, std::string tname, std::string doc);
ParamDesc enum_param(std::string name, std::string tname, std::string doc, std::string def,
                     std::map<std::string, std::string> values);
ParamDesc bool_param(std::string name, std::string tname, std::string doc, bool def);
// The checks of families that pick experts from logits (families.cpp); sets experts_per_lane.
void derive_topk_selection(KernelSpec& s, const char* family_name);

FamilyInfo routing_topk_family();    // families.cpp
FamilyInfo moe_gemm_family();        // families_moe.cpp
FamilyInfo moe_gemm_swap_ab_family();
FamilyInfo moe_gemm_wgmma_family();
FamilyInfo moe_activation_family();
FamilyInfo moe_reduce_family();
FamilyInfo moe_act_quant_family();
FamilyInfo moe_decode_gemv_family();
FamilyInfo fill_random_family();

}  // namespace moejit
