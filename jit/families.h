// The kernel families the templates implement: their parameters (typed, ranged, documented), the
// entry points each generated source instantiates, and the rules that complete a spec (defaults,
// derived parameters such as PADDED, cross-parameter constraints).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "jit/kernel_spec.h"

namespace moejit {

enum class ParamKind { Int, Bool, Enum };

struct ParamDesc {
  std::string name;           // snake_case, as users write it: top_k
  std::string template_name;  // the template parameter it becomes: TOPK; empty = not a template arg
  ParamKind kind = ParamKind::Int;
  std::string doc;
  std::optional<ParamValue> default_value;  // none and not derived = required
  std::int64_t min = 0, max = 0;            // Int range, inclusive
  std::vector<std::string> choices;         // Enum values
  std::map<std::string, std::string> enum_cpp;  // Enum: value -> C++ expression in the source
  bool derived = false;                     // computed by FamilyInfo::derive; users may not set it
};

struct EntryPoint {
  std::string name;                        // short name used by the host: "count"
  std::string kernel;                      // qualified function template: moejit::routing_count_kernel
  std::string args_type;                   // its single by-value argument: moejit::RoutingSortArgs (with
                                           // qualifiers as the template declares them)
  std::string extra_args = {};             // template arguments after the family's, e.g. "8" (entries of one
                                           // kernel template that differ in them); empty: none
  // Whether a spec instantiates this entry (empty: every spec). An entry that would be the same
  // code as another for some specs is left out there: NVRTC compiles it once.
  std::function<bool(const KernelSpec&)> wanted = {};
};

struct FamilyInfo {
  std::string name;
  std::string header;  // template path relative to templates/
  std::string doc;
  std::vector<ParamDesc> params;  // template arguments follow this order
  std::vector<EntryPoint> entries;
  // Fills derived parameters and checks cross-parameter constraints (throws Error(Validate)).
  std::function<void(KernelSpec&)> derive;
};

const std::vector<FamilyInfo>& families();
const FamilyInfo& family(const std::string& name);  // throws Error(Validate) listing known families

// Checks names, kinds and ranges against the family, fills defaults, computes derived parameters.
KernelSpec complete_spec(KernelSpec spec);
// Same, from CLI-style "key=value" strings.
KernelSpec make_spec(const std::string& family_name, const std::string& arch,
                     const std::map<std::string, std::string>& raw_params);

std::int64_t next_pow2(std::int64_t x);

}  // namespace moejit
