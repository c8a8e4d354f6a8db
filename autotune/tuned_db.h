// Tuned-config DB: JSON with a metadata block (moejit version, schema, NVRTC version, device, SMs,
// arch) and, per layer shape, the best tile config and its time for each tuned M bucket.
//   {"metadata": {...}, "entries": {"<shape key>": {"<M>": {"config": {...}, "us": 12.5}, ...}}}
// Lookup: exact shape, nearest M bucket (in log2 M) within a factor of 4 (kTunedBucketReachLog2);
// no entry -> the caller's heuristic (never a failure). A file for another device or arch is ignored
// (hard mismatch); one from another moejit or NVRTC version is used but reported stale (soft
// mismatch: re-tune). A corrupt file is a warning
// and an empty DB. Saving merges into the file under a lock and replaces it atomically, so
// concurrent writers lose nothing.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "autotune/moe_heuristic.h"
#include "runtime/moe_spec.h"

namespace moejit {

namespace detail {
struct EmbeddedFile {
  const char* path;
  const char* sha256;
  const char* text;
};
const std::vector<EmbeddedFile>& embedded_tuned_dbs();  // autotune/db/*.json, embedded at build time
}  // namespace detail

struct DbMetadata {
  std::string moejit_version;
  int schema = 0;
  std::string nvrtc_version;
  std::string device_name;
  int sm_count = 0;
  std::string arch;

  nlohmann::json to_json() const;
  static DbMetadata from_json(const nlohmann::json& j);  // throws nlohmann::json::exception
};

enum class DbMatch { Same, Stale, OtherDevice };

struct TunedEntry {
  int m = 0;
  MoeTileConfig config;
  double us = 0;
};

// How far (in log2 M) a tuned bucket's config is trusted: a config tuned at M serves M / 4 .. 4 M.
// Beyond that the heuristic does better than a distant bucket (a DB whose int4 buckets stopped at M
// = 128 ran M = 8192 on that decode config, twice the heuristic's time). The shipped DBs' buckets
// (powers of two, 1 .. 8192, but a few where the tuned config did not beat its neighbour's in two
// bench rounds) leave no gap under M = 32768.
constexpr double kTunedBucketReachLog2 = 2.0;

// The entry whose M is nearest to m in log2 M (ties: the smaller M) and within kTunedBucketReachLog2
// of it; null when none is. usable: entries to consider (empty = all).
const TunedEntry* nearest_bucket(const std::vector<TunedEntry>& ascending, int m,
                                 const std::function<bool(const MoeTileConfig&)>& usable = {});

// The key of a layer shape: everything that selects kernels or changes their speed.
std::string tuned_shape_key(const MoeSpec& spec);

nlohmann::json tile_config_to_json(const MoeTileConfig& c);
MoeTileConfig tile_config_from_json(const nlohmann::json& j);  // throws Error(Validate) on bad values

class TunedDb {
 public:
  static constexpr int kSchema = 1;

  TunedDb() = default;
  explicit TunedDb(DbMetadata metadata) : metadata_(std::move(metadata)) {}
  // Never throws: a missing file is an empty DB; an unreadable or malformed one too, with *warning set.
  static TunedDb load(const std::filesystem::path& path, std::string* warning);
  static TunedDb parse(const std::string& text, const std::string& origin, std::string* warning);

  const DbMetadata& metadata() const { return metadata_; }
  DbMatch match(const DbMetadata& current) const;
  bool empty() const { return entries_.empty(); }

  void set(const std::string& key, const TunedEntry& entry);
  std::optional<TunedEntry> lookup(const std::string& key, int m) const;  // nearest bucket in reach
  std::vector<TunedEntry> buckets(const std::string& key) const;          // ascending M
  std::vector<std::string> keys() const;

  nlohmann::json to_json() const;
  // Merges these entries into the DB file at `path` (kept: the file's other entries; replaced: the
  // same key and M), under `path`.lock, written to a temporary file and renamed into place. The
  // metadata written is this DB's. Throws Error(Tune) when the file cannot be written.
  void merge_into(const std::filesystem::path& path) const;

 private:
  DbMetadata metadata_;
  std::map<std::string, std::map<int, TunedEntry>> entries_;
};

}  // namespace moejit
