// The tuned DBs shipped in autotune/db/: every entry must stay usable on its device. MoeLayer drops
// an entry whose kernels no longer validate or fit (a warning, then the heuristic's tile, often
// slower), so a rule added to the kernels' validation could silently undo a tuned bucket; this test
// runs the same checks as MoeLayer::load_tuned on every entry, without a GPU.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <limits>
#include <sstream>

#include "autotune/tuned_db.h"
#include "common/error.h"
#include "jit/moe_names.h"
#include "runtime/moe_layer.h"

using namespace moejit;

namespace {

// The MoeSpec a shape key names (tuned_shape_key's format); the caller checks the round trip.
MoeSpec spec_from_key(const std::string& key) {
  MoeSpec s;
  std::istringstream in(key);
  std::string field;
  while (in >> field) {
    const auto eq = field.find('=');
    REQUIRE(eq != std::string::npos);
    const std::string name = field.substr(0, eq), value = field.substr(eq + 1);
    if (name == "E") s.num_experts = std::stoi(value);
    else if (name == "E_local") s.num_local_experts = std::stoi(value);
    else if (name == "top_k") s.top_k = std::stoi(value);
    else if (name == "K") s.hidden = std::stoi(value);
    else if (name == "N") s.intermediate = std::stoi(value);
    else if (name == "dtype") s.dtype = static_cast<MoeDType>(parse_dtype(value));
    else if (name == "act") s.activation = static_cast<MoeActivation>(parse_activation(value));
    else if (name == "bias") s.has_bias = value == "1";
    else if (name == "fused") s.fused = value == "1";
    else if (name == "reduce") s.reduce = value == "fast" ? ReduceMode::Fast : ReduceMode::Deterministic;
    else if (name == "quant") {
      const auto slash = value.find("/g");
      s.quant = static_cast<MoeQuant>(parse_quant(value.substr(0, slash)));
      if (slash != std::string::npos) {
        s.quant_group = std::stoi(value.substr(slash + 2));
        s.quant_zero_points = value.find("+zp") != std::string::npos;
      }
    } else {
      FAIL("unknown field " << name << " in key " << key);
    }
  }
  if (s.num_local_experts == s.num_experts) s.num_local_experts = -1;
  return s;
}

}  // namespace

TEST_CASE("autotune: every entry of the shipped tuned DBs validates and fits its device (as MoeLayer checks)") {
  const auto& files = detail::embedded_tuned_dbs();
  REQUIRE(files.size() >= 2);  // H100 and H200
  constexpr long long kHopperSharedOptin = 227 * 1024;  // max_shared_per_block_optin of H100 / H200
  int entries = 0;
  for (const auto& f : files) {
    const auto db = nlohmann::json::parse(f.text);
    const std::string arch = db.at("metadata").at("arch").get<std::string>();
    REQUIRE(arch == "sm_90a");  // a new device's DB needs its own shared-memory limit here
    for (const auto& [key, buckets] : db.at("entries").items()) {
      const MoeSpec spec = spec_from_key(key);
      INFO(f.path << ": " << key);
      REQUIRE(tuned_shape_key(spec) == key);
      for (const auto& [m, entry] : buckets.items()) {
        INFO("M = " << m);
        const MoeTileConfig config = tile_config_from_json(entry.at("config"));
        ++entries;
        try {
          for (bool rows16 : moe_gemm2_roles_upto(spec, config, std::numeric_limits<int>::max()))
            for (const auto& k : moe_expert_kernel_specs(spec, config, arch, rows16))
              CHECK(moe_gemm_shared_bytes(k, config.block_m) <= kHopperSharedOptin);
        } catch (const Error& e) {
          FAIL_CHECK("not usable: " << e.message());
        }
      }
    }
  }
  MESSAGE(fmt::format("{} tuned entries checked", entries));
  CHECK(entries > 100);
}
