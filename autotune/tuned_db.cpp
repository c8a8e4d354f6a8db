#include "autotune/tuned_db.h"

#include <fmt/format.h>

#include <cmath>

#include "common/error.h"
#include "common/files.h"
#include "jit/moe_names.h"

namespace moejit {

namespace fs = std::filesystem;

nlohmann::json DbMetadata::to_json() const {
  return {{"moejit_version", moejit_version}, {"schema", schema},     {"nvrtc_version", nvrtc_version},
          {"device_name", device_name},       {"sm_count", sm_count}, {"arch", arch}};
}

DbMetadata DbMetadata::from_json(const nlohmann::json& j) {
  DbMetadata m;
  m.moejit_version = j.at("moejit_version").get<std::string>();
  m.schema = j.at("schema").get<int>();
  m.nvrtc_version = j.value("nvrtc_version", std::string());
  m.device_name = j.at("device_name").get<std::string>();
  m.sm_count = j.value("sm_count", 0);
  m.arch = j.at("arch").get<std::string>();
  return m;
}

std::string tuned_shape_key(const MoeSpec& s) {
  // Both MXFP4 layouts share their entries: the packed one decodes with fewer instructions, the
  // same tiles fit and the same ones win (measured on gpt-oss-120b, docs/quantization.md).
  std::string quant = quant_name(s.quant == kQuantMxfp4Packed ? kQuantMxfp4 : s.quant);
  if (s.quant == kQuantInt4Group) quant += fmt::format("/g{}{}", s.quant_group, s.quant_zero_points ? "+zp" : "");
  return fmt::format("E={} E_local={} top_k={} K={} N={} dtype={} quant={} act={} bias={} fused={} reduce={}",
                     s.num_experts, s.local_experts(), s.top_k, s.hidden, s.intermediate, dtype_name(s.dtype), quant,
                     activation_name(s.activation), s.has_bias ? 1 : 0, s.fused ? 1 : 0,
                     s.reduce == ReduceMode::Fast ? "fast" : "deterministic");
}

namespace {
nlohmann::json tile_to_json(const GemmTile& t) {
  nlohmann::json j = t.wgmma ? nlohmann::json{{"wgmma", true}, {"block_n", t.block_n}, {"stages", t.stages},
                                              {"persistent", t.persistent}}
                     : t.swap_ab ? nlohmann::json{{"swap_ab", true}, {"warps_n", t.warps_n}, {"warps_k", t.warps_k},
                                                {"stages", t.stages}}
                               : nlohmann::json{{"block_n", t.block_n}, {"block_k", t.block_k}, {"warps_m", t.warps_m},
                                                {"warps_n", t.warps_n}, {"stages", t.stages}};
  if (t.split_k) j["split_k"] = t.split_k;  // absent = 0 (chosen at launch)
  if (t.staged) j["staged"] = true;          // absent = false
  if (t.walk_rows) j["walk_rows"] = t.walk_rows;  // absent = 0 (the default walk)
  if (t.pingpong) j["pingpong"] = true;            // absent = false
  if (t.multicast) j["multicast"] = true;          // absent = false
  if (t.pregather) j["pregather"] = true;          // absent = false
  if (t.work_queue >= 0) j["work_queue"] = t.work_queue == 1;  // absent = -1 (the layer's rule)
  if (t.swap_ab_wgmma) j["swap_ab_wgmma"] = true;  // absent = false
  return j;
}
GemmTile tile_kind_from_json(const nlohmann::json& j) {
  if (j.value("wgmma", false))
    return wgmma_tile(j.at("block_n").get<int>(), j.at("stages").get<int>(), j.value("split_k", 0),
                      j.value("persistent", false), j.value("staged", false));
  if (j.value("swap_ab", false))
    return swap_ab_tile(j.at("warps_n").get<int>(), j.at("warps_k").get<int>(), j.at("stages").get<int>(),
                        j.value("split_k", 0));
  GemmTile t;
  t.block_n = j.at("block_n").get<int>();
  t.block_k = j.at("block_k").get<int>();
  t.warps_m = j.at("warps_m").get<int>();
  t.warps_n = j.at("warps_n").get<int>();
  t.stages = j.at("stages").get<int>();
  t.split_k = j.value("split_k", 0);
  return t;
}
GemmTile tile_from_json(const nlohmann::json& j) {
  GemmTile t = tile_kind_from_json(j);
  // Read on every kind of tile: the config's check (moe_expert_kernel_specs, when a layer takes it)
  // refuses them on the kernels that do not walk / have no consumer groups / no clusters.
  t.walk_rows = j.value("walk_rows", 0);
  t.pingpong = j.value("pingpong", false);
  t.multicast = j.value("multicast", false);
  t.pregather = j.value("pregather", false);
  t.work_queue = j.contains("work_queue") ? (j.at("work_queue").get<bool>() ? 1 : 0) : -1;
  t.swap_ab_wgmma = j.value("swap_ab_wgmma", false);
  return t;
}
}  // namespace

nlohmann::json tile_config_to_json(const MoeTileConfig& c) {
  if (c.gemv) return {{"gemv", true}};  // nothing else applies
  nlohmann::json j = {{"block_m", c.block_m}, {"gemm1", tile_to_json(c.gemm1)}, {"gemm2", tile_to_json(c.gemm2)}};
  if (c.topk_sum != TopkSum::Auto) j["topk_sum"] = c.topk_sum == TopkSum::Rows ? "rows" : "atomic";  // absent = auto
  return j;
}

MoeTileConfig tile_config_from_json(const nlohmann::json& j) {
  MoeTileConfig c;
  if (j.is_object() && j.value("gemv", false)) {
    MOEJIT_REQUIRE(j.size() == 1, "tile config {}: a gemv config takes no other keys", j.dump());
    return decode_gemv_config();
  }
  try {
    c.block_m = j.at("block_m").get<int>();
    c.gemm1 = tile_from_json(j.at("gemm1"));
    c.gemm2 = tile_from_json(j.at("gemm2"));
    const std::string sum = j.value("topk_sum", std::string("auto"));
    MOEJIT_REQUIRE(sum == "auto" || sum == "atomic" || sum == "rows",
                   "tile config {}: topk_sum = '{}' must be auto, atomic or rows", j.dump(), sum);
    c.topk_sum = sum == "rows" ? TopkSum::Rows : sum == "atomic" ? TopkSum::Atomic : TopkSum::Auto;
  } catch (const nlohmann::json::exception& e) {
    throw Error(Phase::Validate, fmt::format("tile config {}: {}", j.dump(), e.what()));
  }
  // 24: the swap-AB kernel's three-fragment tiles (its block_m is 8, 16, 24 or 32).
  MOEJIT_REQUIRE(c.block_m >= kMoeMinBlockM && c.block_m <= kMoeMaxBlockM &&
                     ((c.block_m & (c.block_m - 1)) == 0 || c.block_m == 24),
                 "tile config: block_m = {} must be a power of two in [{}, {}] or 24", c.block_m, kMoeMinBlockM,
                 kMoeMaxBlockM);
  return c;
}

TunedDb TunedDb::parse(const std::string& text, const std::string& origin, std::string* warning) {
  TunedDb db;
  try {
    const auto j = nlohmann::json::parse(text);
    db.metadata_ = DbMetadata::from_json(j.at("metadata"));
    if (db.metadata_.schema != kSchema) {
      if (warning) *warning = fmt::format("tuned DB {}: schema {} is not {}; ignored", origin, db.metadata_.schema, kSchema);
      return TunedDb(db.metadata_);
    }
    int dropped = 0;
    for (const auto& [key, buckets] : j.at("entries").items())
      for (const auto& [m_text, value] : buckets.items()) {
        try {
          TunedEntry e;
          e.m = std::stoi(m_text);
          e.config = tile_config_from_json(value.at("config"));
          e.us = value.value("us", 0.0);
          if (e.m < 1) throw Error(Phase::Validate, "bucket below 1");
          db.entries_[key][e.m] = e;
        } catch (const std::exception&) {
          ++dropped;  // one bad entry does not cost the others
        }
      }
    if (dropped && warning) *warning = fmt::format("tuned DB {}: {} malformed entries skipped", origin, dropped);
  } catch (const std::exception& e) {
    if (warning) *warning = fmt::format("tuned DB {} is unreadable ({}); using heuristics", origin, e.what());
    return TunedDb();
  }
  return db;
}

TunedDb TunedDb::load(const fs::path& path, std::string* warning) {
  std::string text;
  std::error_code ec;
  if (!fs::exists(path, ec)) return TunedDb();
  if (!try_read_file(path, text)) {
    if (warning) *warning = fmt::format("tuned DB {} cannot be read; using heuristics", path.string());
    return TunedDb();
  }
  return parse(text, path.string(), warning);
}

DbMatch TunedDb::match(const DbMetadata& current) const {
  if (metadata_.device_name != current.device_name || metadata_.arch != current.arch) return DbMatch::OtherDevice;
  if (metadata_.moejit_version != current.moejit_version || metadata_.nvrtc_version != current.nvrtc_version ||
      metadata_.sm_count != current.sm_count)
    return DbMatch::Stale;
  return DbMatch::Same;
}

void TunedDb::set(const std::string& key, const TunedEntry& entry) { entries_[key][entry.m] = entry; }

const TunedEntry* nearest_bucket(const std::vector<TunedEntry>& ascending, int m,
                                 const std::function<bool(const MoeTileConfig&)>& usable) {
  const double target = std::log2(std::max(m, 1));
  const TunedEntry* best = nullptr;
  double best_distance = kTunedBucketReachLog2;
  for (const auto& e : ascending) {
    const double distance = std::abs(std::log2(e.m) - target);
    // <= for the first in reach, < after it: ties keep the smaller M (ascending order).
    if ((!usable || usable(e.config)) && (best ? distance < best_distance : distance <= best_distance)) {
      best = &e;
      best_distance = distance;
    }
  }
  return best;
}

std::optional<TunedEntry> TunedDb::lookup(const std::string& key, int m) const {
  const auto all = buckets(key);
  const TunedEntry* best = nearest_bucket(all, m);
  return best ? std::optional<TunedEntry>(*best) : std::nullopt;
}

std::vector<TunedEntry> TunedDb::buckets(const std::string& key) const {
  std::vector<TunedEntry> out;
  if (auto it = entries_.find(key); it != entries_.end())
    for (const auto& [m, e] : it->second) out.push_back(e);
  return out;
}

std::vector<std::string> TunedDb::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : entries_) out.push_back(k);
  return out;
}

nlohmann::json TunedDb::to_json() const {
  nlohmann::json entries = nlohmann::json::object();
  for (const auto& [key, buckets] : entries_)
    for (const auto& [m, e] : buckets)
      entries[key][std::to_string(m)] = {{"config", tile_config_to_json(e.config)}, {"us", e.us}};
  return {{"metadata", metadata_.to_json()}, {"entries", entries}};
}

void TunedDb::merge_into(const fs::path& path) const {
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  FileLock lock(path.string() + ".lock");
  if (!lock.ok()) throw Error(Phase::Tune, fmt::format("cannot lock {}.lock", path.string()));
  std::string warning;
  TunedDb merged = load(path, &warning);
  // A file for another device keeps nothing of its entries: they would be mislabeled.
  if (merged.metadata_.device_name != metadata_.device_name || merged.metadata_.arch != metadata_.arch)
    merged.entries_.clear();
  merged.metadata_ = metadata_;
  for (const auto& [key, buckets] : entries_)
    for (const auto& [m, e] : buckets) merged.entries_[key][m] = e;
  const fs::path tmp = path.string() + "." + unique_name("tmp");
  try {
    write_file_synced(tmp, merged.to_json().dump(2) + "\n");
    fs::rename(tmp, path);
  } catch (const std::exception& e) {
    fs::remove(tmp, ec);
    throw Error(Phase::Tune, fmt::format("cannot write tuned DB {}: {}", path.string(), e.what()));
  }
}

}  // namespace moejit
