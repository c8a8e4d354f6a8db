#include "jit/kernel_spec.h"

#include <regex>

#include "common/error.h"

namespace moejit {

namespace {
const ParamValue& get(const KernelSpec& s, const std::string& name) {
  auto it = s.params.find(name);
  if (it == s.params.end())
    throw Error(Phase::Validate, fmt::format("{}: parameter '{}' is not set", s.family, name));
  return it->second;
}
template <typename T>
const T& get_as(const KernelSpec& s, const std::string& name, const char* type) {
  const ParamValue& v = get(s, name);
  if (!std::holds_alternative<T>(v))
    throw Error(Phase::Validate, fmt::format("{}: parameter '{}' is not {}", s.family, name, type));
  return std::get<T>(v);
}
}  // namespace

std::int64_t KernelSpec::get_int(const std::string& name) const { return get_as<std::int64_t>(*this, name, "an integer"); }
bool KernelSpec::get_bool(const std::string& name) const { return get_as<bool>(*this, name, "a boolean"); }
const std::string& KernelSpec::get_string(const std::string& name) const {
  return get_as<std::string>(*this, name, "a string");
}

std::string param_to_string(const ParamValue& v) {
  if (auto* i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
  if (auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  return std::get<std::string>(v);
}

nlohmann::json KernelSpec::to_json() const {
  nlohmann::json p = nlohmann::json::object();
  for (const auto& [name, value] : params) std::visit([&](const auto& x) { p[name] = x; }, value);
  return {{"family", family}, {"arch", arch}, {"params", p}};
}

KernelSpec KernelSpec::from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("family") || !j["family"].is_string())
    throw Error(Phase::Validate, "kernel spec JSON needs a string field 'family'");
  KernelSpec s;
  s.family = j["family"].get<std::string>();
  if (j.contains("arch")) {
    if (!j["arch"].is_string()) throw Error(Phase::Validate, "kernel spec field 'arch' must be a string");
    s.arch = j["arch"].get<std::string>();
  }
  if (j.contains("params")) {
    if (!j["params"].is_object()) throw Error(Phase::Validate, "kernel spec field 'params' must be an object");
    for (const auto& [name, value] : j["params"].items()) {
      if (value.is_boolean()) s.params[name] = value.get<bool>();
      else if (value.is_number_integer()) s.params[name] = value.get<std::int64_t>();
      else if (value.is_string()) s.params[name] = value.get<std::string>();
      else
        throw Error(Phase::Validate,
                    fmt::format("kernel spec parameter '{}' must be an integer, boolean or string", name));
    }
  }
  return s;
}

std::string KernelSpec::to_string() const {
  std::string out = fmt::format("{}[{}](", family, arch);
  bool first = true;
  for (const auto& [name, value] : params) {
    out += fmt::format("{}{}={}", first ? "" : ", ", name, param_to_string(value));
    first = false;
  }
  return out + ")";
}

void validate_arch(const std::string& arch) {
  static const std::regex kArch(R"(sm_[1-9][0-9]{1,2}[af]?)");
  if (!std::regex_match(arch, kArch))
    throw Error(Phase::Validate,
                fmt::format("arch '{}' is not of the form sm_<XY>[a|f] (e.g. sm_80, sm_90a, sm_100a)", arch));
}

}  // namespace moejit
