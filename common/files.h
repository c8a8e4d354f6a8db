// Small file helpers with errors that name the path (Error phase Cache unless stated).
#pragma once

#include <filesystem>
#include <string>

namespace moejit {

std::string read_file(const std::filesystem::path& path);  // throws Error(Cache)
bool try_read_file(const std::filesystem::path& path, std::string& out);
// Writes and fsyncs; throws Error(Cache) on failure.
void write_file_synced(const std::filesystem::path& path, const std::string& bytes);
void fsync_directory(const std::filesystem::path& dir);
// A name unique across processes and threads (pid, thread, counter, clock).
std::string unique_name(const std::string& prefix);

// An exclusive flock on `path` (created if missing) for the object's lifetime; ok() is false when
// the file cannot be opened (callers then go on unlocked and say so).
class FileLock {
 public:
  explicit FileLock(const std::filesystem::path& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_;
};

}  // namespace moejit
