#include "common/files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "common/error.h"

namespace moejit {

bool try_read_file(const std::filesystem::path& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return false;
  out = std::move(ss).str();
  return true;
}

std::string read_file(const std::filesystem::path& path) {
  std::string out;
  if (!try_read_file(path, out)) throw Error(Phase::Cache, fmt::format("cannot read {}", path.string()));
  return out;
}

void write_file_synced(const std::filesystem::path& path, const std::string& bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw Error(Phase::Cache, fmt::format("cannot create {}: {}", path.string(), std::strerror(errno)));
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      throw Error(Phase::Cache, fmt::format("cannot write {}: {}", path.string(), std::strerror(err)));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0)
    throw Error(Phase::Cache, fmt::format("cannot sync {}: {}", path.string(), std::strerror(errno)));
}

void fsync_directory(const std::filesystem::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the rename is already atomic, this only adds durability
  ::fsync(fd);
  ::close(fd);
}

std::string unique_name(const std::string& prefix) {
  static std::atomic<unsigned long> counter{0};
  auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  auto tid = std::hash<std::thread::id>{}(std::this_thread::get_id());
  return fmt::format("{}{}-{:x}-{}-{:x}", prefix, ::getpid(), tid & 0xffffff, counter++, now & 0xffffffff);
}

FileLock::FileLock(const std::filesystem::path& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
  if (fd_ >= 0) ::flock(fd_, LOCK_EX);
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

}  // namespace moejit
