// The kernel templates' text: embedded into the library at build time, or read from
// Options::template_dir (MOEJIT_TEMPLATE_DIR) for development. Paths are relative to templates/,
// and templates include each other by those paths, so the same names work as NVRTC headers.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace moejit {

namespace detail {
struct EmbeddedTemplate {
  const char* path;
  const char* sha256;  // computed by CMake at build time; a CPU test checks it against ours
  const char* text;
};
const std::vector<EmbeddedTemplate>& embedded_templates();
}  // namespace detail

class TemplateStore {
 public:
  // Empty dir = the embedded templates.
  explicit TemplateStore(const std::filesystem::path& override_dir = {});

  bool contains(const std::string& path) const { return files_.count(path) != 0; }
  const std::string& text(const std::string& path) const;  // throws Error(Render) naming the path
  const std::string& sha256(const std::string& path) const;
  std::vector<std::string> paths() const;
  // `root` and every template it includes with #include "..." (transitively), sorted.
  std::vector<std::string> closure(const std::string& root) const;
  std::string origin() const { return origin_; }

 private:
  struct File {
    std::string text;
    std::string sha256;
  };
  std::map<std::string, File> files_;
  std::string origin_;
};

}  // namespace moejit
