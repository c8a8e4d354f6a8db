#include "jit/template_store.h"

#include <regex>
#include <set>

#include "common/error.h"
#include "common/files.h"
#include "common/sha256.h"

namespace moejit {

TemplateStore::TemplateStore(const std::filesystem::path& override_dir) {
  if (override_dir.empty()) {
    for (const auto& t : detail::embedded_templates()) files_[t.path] = File{t.text, t.sha256};
    origin_ = "embedded";
    return;
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(override_dir, ec))
    throw Error(Phase::Render, fmt::format("MOEJIT_TEMPLATE_DIR '{}' is not a directory", override_dir.string()));
  for (const auto& entry : std::filesystem::recursive_directory_iterator(override_dir)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".cuh") continue;
    std::string text = read_file(entry.path());
    std::string rel = std::filesystem::relative(entry.path(), override_dir).generic_string();
    files_[rel] = File{text, sha256_hex(text)};
  }
  origin_ = override_dir.string();
}

const std::string& TemplateStore::text(const std::string& path) const {
  auto it = files_.find(path);
  if (it == files_.end())
    throw Error(Phase::Render, fmt::format("kernel template '{}' not found in {} templates", path, origin_));
  return it->second.text;
}

const std::string& TemplateStore::sha256(const std::string& path) const {
  text(path);  // same error when missing
  return files_.at(path).sha256;
}

std::vector<std::string> TemplateStore::paths() const {
  std::vector<std::string> out;
  for (const auto& [path, file] : files_) out.push_back(path);
  return out;
}

std::vector<std::string> TemplateStore::closure(const std::string& root) const {
  static const std::regex kInclude(R"(^\s*#\s*include\s*\"([^\"]+)\")");
  std::set<std::string> seen;
  std::vector<std::string> stack{root};
  while (!stack.empty()) {
    std::string path = stack.back();
    stack.pop_back();
    if (!seen.insert(path).second) continue;
    const std::string& body = text(path);
    std::size_t start = 0;
    while (start < body.size()) {
      std::size_t end = body.find('\n', start);
      if (end == std::string::npos) end = body.size();
      std::smatch m;
      std::string line = body.substr(start, end - start);
      if (std::regex_search(line, m, kInclude)) {
        if (!contains(m[1].str()))
          throw Error(Phase::Render, fmt::format("template '{}' includes '{}', which is not a moejit template "
                                                 "(templates may include only templates/ paths and CUDA headers "
                                                 "with <>)", path, m[1].str()));
        stack.push_back(m[1].str());
      }
      start = end + 1;
    }
  }
  return {seen.begin(), seen.end()};
}

}  // namespace moejit
