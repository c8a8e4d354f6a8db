#include "cache/disk_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>

#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "common/sha256.h"

namespace fs = std::filesystem;

namespace moejit {

namespace {
constexpr const char* kSourceFile = "kernel.cu";
constexpr const char* kPtxFile = "kernel.ptx";
constexpr const char* kCubinFile = "kernel.cubin";
constexpr const char* kManifestFile = "manifest.json";

std::uint64_t dir_bytes(const fs::path& dir) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec)) total += it->file_size(ec);
  return total;
}

bool is_key(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(c) && !std::isupper(c); });
}

// An exclusive advisory lock on a file, for the stats counters only (entries need none).
}  // namespace

nlohmann::json CacheStats::to_json() const {
  return {{"memory_hits", memory_hits}, {"disk_hits", disk_hits}, {"misses", misses},
          {"compiles", compiles},       {"invalid_entries", invalid_entries}, {"evictions", evictions},
          {"compile_seconds", compile_seconds}};
}

void CacheStats::add(const CacheStats& o) {
  memory_hits += o.memory_hits; disk_hits += o.disk_hits; misses += o.misses; compiles += o.compiles;
  invalid_entries += o.invalid_entries; evictions += o.evictions; compile_seconds += o.compile_seconds;
}

KernelCache::KernelCache(fs::path root, std::uint64_t max_bytes) : root_(std::move(root)), max_bytes_(max_bytes) {
  if (root_.empty()) return;
  try {
    fs::create_directories(root_ / "tmp");
    fs::create_directories(entries_dir());
    auto probe = root_ / "tmp" / unique_name("probe-");
    write_file_synced(probe, "ok");
    fs::remove(probe);
    on_disk_ = true;
  } catch (const std::exception& e) {
    log(LogLevel::Warn, "kernel cache at {} is not writable ({}); using an in-memory cache for this process",
        root_.string(), e.what());
  }
}

KernelCache::~KernelCache() {
  if (!on_disk_) return;
  try {
    CacheStats mine = stats();
    if (mine.memory_hits + mine.disk_hits + mine.misses + mine.compiles + mine.evictions == 0) return;
    FileLock lock(root_ / "stats.lock");
    if (!lock.ok()) return;
    CacheStats total = persisted_stats();
    total.add(mine);
    auto tmp = root_ / "tmp" / unique_name("stats-");
    write_file_synced(tmp, total.to_json().dump(2));
    fs::rename(tmp, root_ / "stats.json");
  } catch (const std::exception& e) {
    log(LogLevel::Debug, "could not update cache statistics: {}", e.what());
  }
}

CacheStats KernelCache::persisted_stats() const {
  CacheStats s;
  std::string text;
  if (root_.empty() || !try_read_file(root_ / "stats.json", text)) return s;
  try {
    auto j = nlohmann::json::parse(text);
    s.memory_hits = j.value("memory_hits", 0ull); s.disk_hits = j.value("disk_hits", 0ull);
    s.misses = j.value("misses", 0ull); s.compiles = j.value("compiles", 0ull);
    s.invalid_entries = j.value("invalid_entries", 0ull); s.evictions = j.value("evictions", 0ull);
    s.compile_seconds = j.value("compile_seconds", 0.0);
  } catch (const std::exception&) {
    // a damaged stats file only loses history
  }
  return s;
}

fs::path KernelCache::entries_dir() const { return root_ / fmt::format("v{}", kSchema); }
fs::path KernelCache::failed_sources_dir() const { return on_disk_ ? root_ / "failed" : fs::path(); }
fs::path KernelCache::entry_dir(const std::string& key) const { return entries_dir() / key.substr(0, 2) / key; }

CacheStats KernelCache::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void KernelCache::record_compile(double seconds) {
  std::lock_guard lock(mutex_);
  stats_.compiles++;
  stats_.compile_seconds += seconds;
}

std::shared_ptr<CacheEntry> KernelCache::load_valid(const fs::path& dir, const std::string& key,
                                                    std::string* problem) const {
  auto fail = [&](std::string why) -> std::shared_ptr<CacheEntry> {
    if (problem) *problem = std::move(why);
    return nullptr;
  };
  std::string text;
  if (!try_read_file(dir / kManifestFile, text)) return fail("missing manifest.json");
  auto e = std::make_shared<CacheEntry>();
  try {
    e->manifest = nlohmann::json::parse(text);
  } catch (const std::exception&) {
    return fail("manifest.json is not valid JSON");
  }
  const auto& m = e->manifest;
  if (!m.is_object() || m.value("key", "") != key || m.value("schema", -1) != kSchema || !m.contains("files") ||
      !m["files"].is_object())
    return fail("manifest.json does not describe this key and schema");
  e->key = key;
  for (auto [name, target] : {std::pair{kSourceFile, &e->source}, {kPtxFile, &e->ptx}, {kCubinFile, &e->cubin}}) {
    if (!try_read_file(dir / name, *target)) return fail(fmt::format("missing {}", name));
    const auto& f = m["files"].value(name, nlohmann::json());
    if (!f.is_object() || f.value("bytes", std::uint64_t(0)) != target->size())
      return fail(fmt::format("{} has the wrong size", name));
    if (f.value("sha256", "") != sha256_hex(*target)) return fail(fmt::format("{} does not match its hash", name));
  }
  return e;
}

void KernelCache::move_aside(const fs::path& dir) {
  // Rename first (atomic), then delete: a concurrent reader sees the entry whole or not at all.
  std::error_code ec;
  auto trash = root_ / "tmp" / unique_name("trash-");
  fs::rename(dir, trash, ec);
  if (!ec) fs::remove_all(trash, ec);
}

std::shared_ptr<const CacheEntry> KernelCache::find(const std::string& key) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = memory_.find(key); it != memory_.end()) {
      stats_.memory_hits++;
      return it->second;
    }
  }
  if (on_disk_) {
    auto dir = entry_dir(key);
    std::error_code ec;
    if (fs::exists(dir, ec)) {
      std::string problem;
      if (auto e = load_valid(dir, key, &problem)) {
        fs::last_write_time(dir, fs::file_time_type::clock::now(), ec);  // LRU clock; best effort
        std::lock_guard lock(mutex_);
        stats_.disk_hits++;
        return memory_.emplace(key, std::move(e)).first->second;
      }
      log(LogLevel::Warn, "kernel cache entry {} is invalid ({}); it will be rebuilt", key, problem);
      move_aside(dir);
      std::lock_guard lock(mutex_);
      stats_.invalid_entries++;
    }
  }
  std::lock_guard lock(mutex_);
  stats_.misses++;
  return nullptr;
}

void KernelCache::write_entry_files(const fs::path& dir, const CacheEntry& e) const {
  fs::create_directories(dir);
  write_file_synced(dir / kSourceFile, e.source);
  write_file_synced(dir / kPtxFile, e.ptx);
  write_file_synced(dir / kCubinFile, e.cubin);
  write_file_synced(dir / kManifestFile, e.manifest.dump(2));
  fsync_directory(dir);
}

std::shared_ptr<const CacheEntry> KernelCache::publish(CacheEntry entry) {
  if (!is_key(entry.key)) throw Error(Phase::Cache, fmt::format("'{}' is not a cache key", entry.key));
  entry.manifest["key"] = entry.key;
  entry.manifest["schema"] = kSchema;
  entry.manifest["files"] = {
      {kSourceFile, {{"bytes", entry.source.size()}, {"sha256", sha256_hex(entry.source)}}},
      {kPtxFile, {{"bytes", entry.ptx.size()}, {"sha256", sha256_hex(entry.ptx)}}},
      {kCubinFile, {{"bytes", entry.cubin.size()}, {"sha256", sha256_hex(entry.cubin)}}}};
  auto shared = std::make_shared<const CacheEntry>(std::move(entry));
  const std::string& key = shared->key;

  if (on_disk_) {
    try {
      auto tmp = root_ / "tmp" / unique_name("entry-");
      write_entry_files(tmp, *shared);
      auto final_dir = entry_dir(key);
      fs::create_directories(final_dir.parent_path());
      for (int attempt = 0;; ++attempt) {
        std::error_code ec;
        fs::rename(tmp, final_dir, ec);  // atomic; fails when the target exists and is not empty
        if (!ec) {
          fsync_directory(final_dir.parent_path());
          break;
        }
        if (auto theirs = load_valid(final_dir, key, nullptr)) {  // lost the race to a valid twin
          fs::remove_all(tmp, ec);
          std::lock_guard lock(mutex_);
          return memory_.emplace(key, std::move(theirs)).first->second;
        }
        if (attempt == 3) {
          fs::remove_all(tmp, ec);
          throw Error(Phase::Cache, fmt::format("cannot publish {}: {}", final_dir.string(), ec.message()));
        }
        move_aside(final_dir);  // an invalid entry sits there: replace it
      }
      enforce_size_cap();
    } catch (const Error& e) {
      log(LogLevel::Warn, "kernel cache: {}; keeping the kernel in memory only", e.message());
    } catch (const std::exception& e) {
      log(LogLevel::Warn, "kernel cache: publishing {} failed ({}); keeping it in memory only", key, e.what());
    }
  }
  std::lock_guard lock(mutex_);
  return memory_.insert_or_assign(key, shared).first->second;
}

void KernelCache::invalidate(const std::string& key, const std::string& why) {
  log(LogLevel::Warn, "dropping kernel cache entry {}: {}", key, why);
  {
    std::lock_guard lock(mutex_);
    memory_.erase(key);
    stats_.invalid_entries++;
  }
  if (on_disk_) move_aside(entry_dir(key));
}

std::vector<CacheEntryInfo> KernelCache::list() const {
  std::vector<CacheEntryInfo> out;
  if (root_.empty()) return out;
  std::error_code ec;
  for (auto shard = fs::directory_iterator(entries_dir(), ec); !ec && shard != fs::directory_iterator();
       shard.increment(ec)) {
    std::error_code ec2;
    for (auto it = fs::directory_iterator(shard->path(), ec2); !ec2 && it != fs::directory_iterator();
         it.increment(ec2)) {
      CacheEntryInfo info;
      info.key = it->path().filename().string();
      info.dir = it->path();
      info.bytes = dir_bytes(info.dir);
      std::error_code ec3;
      info.last_used = fs::last_write_time(info.dir, ec3);
      auto e = is_key(info.key) ? load_valid(info.dir, info.key, &info.problem) : nullptr;
      if (!is_key(info.key)) info.problem = "not a cache key";
      info.valid = e != nullptr;
      if (e) info.manifest = e->manifest;
      out.push_back(std::move(info));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  return out;
}

std::size_t KernelCache::prune(std::uint64_t max_bytes) {
  auto entries = list();
  std::uint64_t total = 0;
  for (const auto& e : entries) total += e.bytes;
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.last_used < b.last_used; });
  std::size_t evicted = 0;
  for (const auto& e : entries) {
    if (total <= max_bytes) break;
    move_aside(e.dir);
    total -= e.bytes;
    ++evicted;
    std::lock_guard lock(mutex_);
    memory_.erase(e.key);
    stats_.evictions++;
  }
  return evicted;
}

void KernelCache::enforce_size_cap() {
  if (dir_bytes(entries_dir()) > max_bytes_) {
    std::size_t n = prune(max_bytes_);
    log(LogLevel::Info, "kernel cache over {} bytes: evicted {} least recently used entries", max_bytes_, n);
  }
}

std::size_t KernelCache::remove_invalid() {
  std::size_t removed = 0;
  for (const auto& e : list()) {
    if (e.valid) continue;
    move_aside(e.dir);
    ++removed;
  }
  return removed;
}

void KernelCache::clear() {
  {
    std::lock_guard lock(mutex_);
    memory_.clear();
  }
  if (!on_disk_) return;
  for (const auto& e : list()) move_aside(e.dir);
  std::error_code ec;
  fs::remove_all(root_ / "failed", ec);
}

}  // namespace moejit
