#include "runtime/driver.h"

#include <dlfcn.h>

#include <mutex>

#include "common/log.h"

namespace moejit {

// Two-level stringification: expands cuda.h's versioning macros first.
#define MOEJIT_SYMBOL_NAME_IMPL(x) #x
#define MOEJIT_SYMBOL_NAME(x) MOEJIT_SYMBOL_NAME_IMPL(x)

std::shared_ptr<DriverApi> DriverApi::load() {
  void* handle = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    throw Error(Phase::Driver, fmt::format("no CUDA driver on this machine: dlopen(\"libcuda.so.1\") failed ({}). "
                                           "Kernels can still be compiled and cached; running them needs a GPU.",
                                           why ? why : "unknown reason"));
  }
  std::shared_ptr<DriverApi> api(new DriverApi());
  api->handle_ = handle;
  // Resolve each entry point by the exact symbol cuda.h maps its name to (cuMemAlloc -> cuMemAlloc_v2,
  // cuGraphInstantiate -> cuGraphInstantiateWithFlags, ...), so the pointer's ABI is the prototype we
  // compiled against. cuGetProcAddress would hand out the newest version instead (CUDA 13's
  // cuCtxSynchronize resolves to cuCtxSynchronize_v2(CUcontext)), a silent ABI mismatch.
#define MOEJIT_RESOLVE_FN(name)                                                                            \
  {                                                                                                        \
    void* fn = ::dlsym(handle, MOEJIT_SYMBOL_NAME(name));                                                  \
    if (fn == nullptr)                                                                                     \
      throw Error(Phase::Driver, fmt::format("the CUDA driver lacks {}: it is older than the CUDA {} headers " \
                                             "moejit was built with; update the driver",                   \
                                             MOEJIT_SYMBOL_NAME(name), CUDA_VERSION));                      \
    api->name = reinterpret_cast<decltype(api->name)>(fn);                                                 \
  }
  MOEJIT_DRIVER_FUNCTIONS(MOEJIT_RESOLVE_FN)
#undef MOEJIT_RESOLVE_FN
  CUresult r = api->cuInit(0);
  if (r != CUDA_SUCCESS)
    throw Error(Phase::Driver, fmt::format("cuInit failed: {} (is there a GPU, and may this process use it?)",
                                           api->error_name(r)));
  api->cuDriverGetVersion(&api->driver_version);
  int count = 0;
  r = api->cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS || count == 0)
    throw Error(Phase::Driver, "the CUDA driver is loaded but reports no GPU");
  return api;
}

bool DriverApi::available(std::string* why) {
  try {
    load();
    return true;
  } catch (const Error& e) {
    if (why) *why = e.message();
    return false;
  }
}

DriverApi::~DriverApi() {
  // Never dlclose libcuda: other components of the process (and static destructors) may still
  // hold handles from it.
}

std::string DriverApi::error_name(CUresult r) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName) cuGetErrorName(r, &name);
  if (cuGetErrorString) cuGetErrorString(r, &text);
  return fmt::format("{} ({})", name ? name : fmt::format("CUresult {}", static_cast<int>(r)), text ? text : "");
}

void check_cu(const DriverApi& api, CUresult result, Phase phase, const char* call, const char* file, int line) {
  if (result == CUDA_SUCCESS) return;
  throw_at(phase, file, line, fmt::format("{} failed: {}", call, api.error_name(result)));
}

}  // namespace moejit
