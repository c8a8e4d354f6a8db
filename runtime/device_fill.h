// Device-side random fills (fill_random template) for benchmark and tuning buffers: multi-GB
// weights filled in place, never zeros, reproducible from a seed.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>

#include "runtime/tensor_view.h"

namespace moejit {

class Runtime;
class Module;

class DeviceFiller {
 public:
  explicit DeviceFiller(Runtime& runtime);
  // count elements of `type` (BF16, F16 or F32) at `ptr`, uniform in [-scale, scale).
  void fill(CUstream stream, CUdeviceptr ptr, std::size_t count, ScalarType type, std::uint64_t seed, float scale);

 private:
  Runtime& runtime_;
  std::shared_ptr<const Module> modules_[3];
};

}  // namespace moejit
