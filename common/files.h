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

}  // namespace moejit
