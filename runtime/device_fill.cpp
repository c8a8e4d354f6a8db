#include "runtime/device_fill.h"

#include "common/error.h"
#include "jit/families.h"
#include "runtime/runtime.h"
#include "templates/common/fill_random_args.cuh"

namespace moejit {

DeviceFiller::DeviceFiller(Runtime& runtime) : runtime_(runtime) {}

void DeviceFiller::fill(CUstream stream, CUdeviceptr ptr, std::size_t count, ScalarType type, std::uint64_t seed,
                        float scale) {
  MOEJIT_REQUIRE(type != ScalarType::I32, "fill_random: integer buffers are not filled with random values");
  if (count == 0) return;
  const int index = type == ScalarType::BF16 ? 0 : type == ScalarType::F16 ? 1 : 2;
  static const char* kNames[] = {"bf16", "f16", "f32"};
  if (!modules_[index])
    modules_[index] = runtime_.load(complete_spec({"fill_random", runtime_.device_arch(), {{"type", std::string(kNames[index])}}}));
  FillRandomArgs a{reinterpret_cast<void*>(ptr), count, seed, scale};
  const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((count + 255) / 256, 1u << 16));
  modules_[index]->kernel("fill").launch(stream, {blocks, 1, 1, 256, 1, 1, 0}, a);
}

}  // namespace moejit
