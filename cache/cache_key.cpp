#include "cache/cache_key.h"

#include <algorithm>

#include "common/sha256.h"

namespace moejit {

std::string compute_cache_key(const CacheKeyInputs& in) {
  Sha256 h;
  h.field("moejit-cache-key").field(std::to_string(in.schema)).field(in.moejit_version);
  h.field(in.arch).field(in.nvrtc_version).field(std::to_string(in.cuda_headers_version));
  h.field(in.source);
  auto templates = in.templates;
  std::sort(templates.begin(), templates.end());  // order of discovery must not matter
  h.field(std::to_string(templates.size()));
  for (const auto& [path, hash] : templates) h.field(path).field(hash);
  h.field(std::to_string(in.options.size()));
  for (const auto& o : in.options) h.field(o);
  return h.hex();
}

}  // namespace moejit
