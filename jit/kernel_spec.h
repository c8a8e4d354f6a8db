// KernelSpec: which template family, with which typed named parameters, for which arch. A spec is
// "complete" once make_spec/complete_spec has checked it against its family, filled the defaults and
// derived parameters (e.g. PADDED); only complete specs are rendered, hashed and compiled.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <variant>

namespace moejit {

using ParamValue = std::variant<std::int64_t, bool, std::string>;

struct KernelSpec {
  std::string family;
  std::string arch;  // e.g. "sm_90a", "sm_80", "sm_100a"
  std::map<std::string, ParamValue> params;

  std::int64_t get_int(const std::string& name) const;  // throws Error(Validate) when absent/mistyped
  bool get_bool(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;

  nlohmann::json to_json() const;
  static KernelSpec from_json(const nlohmann::json& j);  // throws Error(Validate)
  std::string to_string() const;  // "routing_sort[sm_90a](padded=256, top_k=6, ...)"
  bool operator==(const KernelSpec&) const = default;
};

std::string param_to_string(const ParamValue& v);

// Checks the arch's spelling: sm_<major><minor>[a|f]; throws Error(Validate) otherwise.
void validate_arch(const std::string& arch);

}  // namespace moejit
