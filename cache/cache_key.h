// The cache key: SHA-256 over everything that changes the binary. Any change to this function or
// its inputs' spelling changes every key; a golden-key test makes such changes deliberate.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace moejit {

struct CacheKeyInputs {
  std::string source;                                           // the generated source
  std::vector<std::pair<std::string, std::string>> templates;  // (path, sha256) of every header used
  std::vector<std::string> options;                            // compile options (no machine paths)
  std::string nvrtc_version;                                   // "13.0"
  int cuda_headers_version = 0;                                // CUDA_VERSION of the headers used
  std::string arch;                                            // exact arch, e.g. sm_90a
  std::string moejit_version;
  int schema = 0;                                              // cache layout/manifest schema
};

std::string compute_cache_key(const CacheKeyInputs& in);  // 64 hex chars

}  // namespace moejit
