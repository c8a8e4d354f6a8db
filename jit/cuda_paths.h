// Where the CUDA headers NVRTC needs (cuda_fp16.h, cuda_bf16.h, ...) live on this machine.
#pragma once

#include <filesystem>
#include <string>

namespace moejit {

struct CudaHeaders {
  std::filesystem::path include_dir;
  int cuda_version = 0;  // CUDA_VERSION from that dir's cuda.h (e.g. 13000); part of the cache key
};

// Searches, in order: `preferred` (Options::cuda_home), $CUDA_HOME, $CUDA_PATH, the nvcc on $PATH,
// /usr/local/cuda, the toolkit the library was built with. Throws Error(Compile) naming every place
// searched when none has include/cuda_fp16.h.
CudaHeaders find_cuda_headers(const std::filesystem::path& preferred);

}  // namespace moejit
