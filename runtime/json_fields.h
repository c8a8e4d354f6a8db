// Typed reads of a model config's optional JSON fields (model_config.cpp, model_quant_config.cpp).
// A field that is missing or null (configs write "group_size": null) is absent; a field that is
// present with another type is an error naming it, never skipped as if it were absent (a string
// "n_group": "8" read as "no groups" would route the model wrongly without a word).
#pragma once

#include <fmt/format.h>

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>

#include "common/error.h"

namespace moejit {

// The first of `names` present and not null in j, or nullptr; `found` gets its name.
inline const nlohmann::json* first_present(const nlohmann::json& j, std::initializer_list<const char*> names,
                                           const char** found = nullptr) {
  if (!j.is_object()) return nullptr;
  for (const char* n : names) {
    const auto it = j.find(n);
    if (it != j.end() && !it->is_null()) {
      if (found) *found = n;
      return &*it;
    }
  }
  return nullptr;
}

// The first of `names` present (first_present) as T: booleans as bool, integers (not 8.5, not
// true) as integral T, any number as floating T, strings as std::string, anything else as
// nlohmann's conversion takes it. Absent: nullopt. Another type: a Validate error "<what> field
// <name> = <value> has the wrong type".
template <typename T>
std::optional<T> typed_field(const nlohmann::json& j, std::initializer_list<const char*> names, const char* what) {
  const char* name = nullptr;
  const nlohmann::json* v = first_present(j, names, &name);
  if (v == nullptr) return std::nullopt;
  bool ok;
  if constexpr (std::is_same_v<T, bool>) ok = v->is_boolean();
  else if constexpr (std::is_integral_v<T>) ok = v->is_number_integer();
  else if constexpr (std::is_floating_point_v<T>) ok = v->is_number();
  else if constexpr (std::is_same_v<T, std::string>) ok = v->is_string();
  else ok = true;  // e.g. std::vector<int>: the conversion below checks
  if (ok) {
    try {
      return v->get<T>();
    } catch (const nlohmann::json::exception&) {
    }
  }
  throw Error(Phase::Validate, fmt::format("{} field {} = {} has the wrong type", what, name, v->dump()));
}

}  // namespace moejit
