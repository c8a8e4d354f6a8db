// Content-addressed kernel cache: an in-memory map in front of a directory of entries
//   <root>/v<schema>/<key[0:2]>/<key>/{kernel.cu, kernel.ptx, kernel.cubin, manifest.json}
// Publish writes into <root>/tmp/<unique>/, fsyncs, then renames the directory into place; whoever
// loses a race drops its copy. Readers take no lock. An entry failing validation (missing file, bad
// manifest, size or hash mismatch) is a miss: it is moved aside and replaced. The cache knows
// nothing of what a kernel computes: the manifest's content beyond "files" is the caller's.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace moejit {

struct CacheEntry {
  std::string key;
  std::string source;
  std::string ptx;
  std::string cubin;
  nlohmann::json manifest;  // caller's metadata; the cache adds "key", "schema" and "files"
};

struct CacheStats {
  std::uint64_t memory_hits = 0, disk_hits = 0, misses = 0, compiles = 0;
  std::uint64_t invalid_entries = 0, evictions = 0;
  double compile_seconds = 0;
  nlohmann::json to_json() const;
  void add(const CacheStats& other);
};

struct CacheEntryInfo {
  std::string key;
  std::filesystem::path dir;
  std::uint64_t bytes = 0;
  std::filesystem::file_time_type last_used;
  bool valid = false;
  std::string problem;      // why it is invalid
  nlohmann::json manifest;  // null when unreadable
};

class KernelCache {
 public:
  static constexpr int kSchema = 1;

  // Empty root = in-memory only. A root that cannot be written degrades to in-memory with one warning.
  KernelCache(std::filesystem::path root, std::uint64_t max_bytes);
  ~KernelCache();  // adds this process's counters to <root>/stats.json
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  std::shared_ptr<const CacheEntry> find(const std::string& key);
  // Stores the entry; returns the one now cached (a concurrent publisher's identical entry may win).
  std::shared_ptr<const CacheEntry> publish(CacheEntry entry);
  // Drops an entry that validated but proved unusable (e.g. a cubin the driver rejects).
  void invalidate(const std::string& key, const std::string& why);
  void record_compile(double seconds);

  bool on_disk() const { return on_disk_; }
  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path entries_dir() const;
  std::filesystem::path failed_sources_dir() const;  // empty when in-memory
  CacheStats stats() const;
  CacheStats persisted_stats() const;  // <root>/stats.json: totals of earlier processes

  // Management (the `moejit cache` command).
  std::vector<CacheEntryInfo> list() const;  // validates every entry
  std::size_t prune(std::uint64_t max_bytes);  // LRU eviction down to max_bytes; returns evicted
  std::size_t remove_invalid();
  void clear();

 private:
  std::filesystem::path entry_dir(const std::string& key) const;
  std::shared_ptr<CacheEntry> load_valid(const std::filesystem::path& dir, const std::string& key,
                                         std::string* problem) const;
  void move_aside(const std::filesystem::path& dir);
  void write_entry_files(const std::filesystem::path& dir, const CacheEntry& e) const;
  void enforce_size_cap();

  std::filesystem::path root_;
  std::uint64_t max_bytes_;
  bool on_disk_ = false;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const CacheEntry>> memory_;
  CacheStats stats_;
};

}  // namespace moejit
