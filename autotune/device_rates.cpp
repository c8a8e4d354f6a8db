#include "autotune/device_rates.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "common/error.h"
#include "runtime/device_buffer.h"
#include "runtime/event_timer.h"

namespace moejit {

namespace {
double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// cuBLAS entry points used, declared here (values from cublas_api.h / library_types.h) so the
// bench neither links nor needs cuBLAS.
using CublasCreate = int (*)(void**);
using CublasDestroy = int (*)(void*);
using CublasGemmEx = int (*)(void*, int, int, int, int, int, const void*, const void*, int, int, const void*, int, int,
                             const void*, void*, int, int, int, int);
constexpr int kCublasOpN = 0, kCudaR16BF = 14, kCublasCompute32F = 68, kCublasGemmDefault = -1;

void* open_cublas(std::string* tried) {
  std::vector<std::string> names;
  if (const char* env = std::getenv("MOEJIT_CUBLAS")) names.push_back(env);
  names.insert(names.end(), {"libcublas.so.13", "libcublas.so", "/usr/local/cuda/lib64/libcublas.so.13"});
  for (const char* root : {"/usr/local/lib", "/usr/lib", "/opt/conda/lib"}) {
    std::error_code ec;
    if (!std::filesystem::is_directory(root, ec)) continue;
    for (const auto& py : std::filesystem::directory_iterator(root, ec))
      for (const char* site : {"dist-packages", "site-packages"}) {
        auto lib = py.path() / site / "nvidia" / "cublas" / "lib" / "libcublas.so.13";
        if (std::filesystem::exists(lib, ec)) names.push_back(lib.string());
      }
  }
  for (const auto& n : names) {
    if (void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    *tried += (tried->empty() ? "" : ", ") + n;
  }
  return nullptr;
}
}  // namespace

double measure_copy_bandwidth(DriverApi& api) {
  const std::size_t bytes = std::size_t(1) << 30;
  DeviceBuffer a(api, bytes), b(api, bytes);
  a.fill_u32(0x3f800001u);
  EventTimer timer(api);
  std::vector<double> samples;
  for (int i = 0; i < 12; ++i) {
    const double ms = timer.time_ms(nullptr, [&] { MOEJIT_CHECK_CU(api, Launch, cuMemcpyDtoD(b.ptr(), a.ptr(), bytes)); });
    if (i >= 2) samples.push_back(2.0 * bytes / (ms * 1e-3));
  }
  return median_of(samples);
}

double measure_gemm_rate(DriverApi& api, DeviceFiller& filler, std::string* why) {
  std::string tried;
  void* lib = open_cublas(&tried);
  if (!lib) {
    *why = "no cuBLAS found (tried " + tried + ")";
    return 0;
  }
  auto create = reinterpret_cast<CublasCreate>(dlsym(lib, "cublasCreate_v2"));
  auto destroy = reinterpret_cast<CublasDestroy>(dlsym(lib, "cublasDestroy_v2"));
  auto gemm = reinterpret_cast<CublasGemmEx>(dlsym(lib, "cublasGemmEx"));
  void* handle = nullptr;
  if (!create || !destroy || !gemm || create(&handle) != 0) {
    *why = "cuBLAS found but its entry points or handle failed";
    return 0;
  }
  const int n = 8192;
  DeviceBuffer a(api, std::size_t(n) * n * 2), b(api, std::size_t(n) * n * 2), c(api, std::size_t(n) * n * 2);
  filler.fill(nullptr, a.ptr(), std::size_t(n) * n, ScalarType::BF16, 1, 1.f);  // random, never zeros
  filler.fill(nullptr, b.ptr(), std::size_t(n) * n, ScalarType::BF16, 2, 1.f);
  const float alpha = 1.f, beta = 0.f;
  EventTimer timer(api);
  std::vector<double> samples;
  for (int i = 0; i < 13; ++i) {
    int status = 0;
    const double ms = timer.time_ms(nullptr, [&] {
      status = gemm(handle, kCublasOpN, kCublasOpN, n, n, n, &alpha, reinterpret_cast<void*>(a.ptr()), kCudaR16BF, n,
                    reinterpret_cast<void*>(b.ptr()), kCudaR16BF, n, &beta, reinterpret_cast<void*>(c.ptr()), kCudaR16BF,
                    n, kCublasCompute32F, kCublasGemmDefault);
    });
    if (status != 0) {
      destroy(handle);
      *why = fmt::format("cublasGemmEx returned {}", status);
      return 0;
    }
    if (i >= 3) samples.push_back(2.0 * n * n * double(n) / (ms * 1e-3));
  }
  destroy(handle);
  return median_of(samples);
}

}  // namespace moejit
