// The CUDA Driver API, loaded with dlopen("libcuda.so.1") at run time: the library, the CLI and the
// tests start on machines with no driver, and fail only when something tries to run on a GPU.
// cuda.h supplies the types; each entry point is resolved by the versioned symbol cuda.h maps it to.
#pragma once

#include <cuda.h>

#include <memory>
#include <string>

#include "common/error.h"

namespace moejit {

#define MOEJIT_DRIVER_FUNCTIONS(X)                                                                  \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGet)             \
  X(cuDeviceGetCount) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceTotalMem)                \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxGetCurrent)    \
  X(cuCtxSynchronize) X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)                 \
  X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuLaunchKernel) X(cuLaunchKernelEx) X(cuMemAlloc) X(cuMemFree)          \
  X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemsetD8) X(cuMemsetD32) X(cuMemsetD32Async)  \
  X(cuMemcpyHtoDAsync) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)                  \
  X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiate) X(cuGraphLaunch)              \
  X(cuGraphDestroy) X(cuGraphExecDestroy) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)       \
  X(cuEventSynchronize) X(cuEventElapsedTime) X(cuTensorMapEncodeTiled) X(cuOccupancyMaxActiveClusters)

class DriverApi {
 public:
  // Loads libcuda and calls cuInit(0). Throws Error(Driver) saying plainly that no driver (or no
  // GPU) is present, with dlopen's or cuInit's own words.
  static std::shared_ptr<DriverApi> load();
  // True when a driver and at least one device are present; never throws.
  static bool available(std::string* why = nullptr);
  ~DriverApi();

#define MOEJIT_DECLARE_FN(name) decltype(&::name) name = nullptr;
  MOEJIT_DRIVER_FUNCTIONS(MOEJIT_DECLARE_FN)
#undef MOEJIT_DECLARE_FN

  int driver_version = 0;
  std::string error_name(CUresult r) const;

 private:
  DriverApi() = default;
  void* handle_ = nullptr;
};

// Throws Error(phase) "<call> failed: CUDA_ERROR_X (description)" with file:line.
void check_cu(const DriverApi& api, CUresult result, Phase phase, const char* call, const char* file, int line);

}  // namespace moejit

#define MOEJIT_CHECK_CU(api, phase, call) ::moejit::check_cu((api), (api).call, ::moejit::Phase::phase, #call, __FILE__, __LINE__)
