#include "autotune/device_rates.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
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

// `base` = "libcublas" or "libcublasLt"; MOEJIT_CUBLAS names libcublas explicitly (cuBLASLt is then
// looked for beside it).
void* open_cublas(std::string* tried, const std::string& base = "libcublas") {
  std::vector<std::string> names;
  if (const char* env = std::getenv("MOEJIT_CUBLAS")) {
    const std::filesystem::path named(env);
    names.push_back(base == "libcublas" ? named.string() : (named.parent_path() / (base + ".so.13")).string());
  }
  names.insert(names.end(), {base + ".so.13", base + ".so", "/usr/local/cuda/lib64/" + base + ".so.13"});
  for (const char* root : {"/usr/local/lib", "/usr/lib", "/opt/conda/lib"}) {
    std::error_code ec;
    if (!std::filesystem::is_directory(root, ec)) continue;
    for (const auto& py : std::filesystem::directory_iterator(root, ec))
      for (const char* site : {"dist-packages", "site-packages"}) {
        auto lib = py.path() / site / "nvidia" / "cublas" / "lib" / (base + ".so.13");
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

double measure_fp8_gemm_rate(DriverApi& api, std::string* why) {
  std::string tried;
  void* lib = open_cublas(&tried, "libcublasLt");
  if (!lib) {
    *why = "no cuBLASLt found (tried " + tried + ")";
    return 0;
  }
  // Entry points typed from cublasLt.h, resolved at run time (nothing links cuBLAS).
#define MOEJIT_LT(name) auto name##_fn = reinterpret_cast<decltype(&name)>(dlsym(lib, #name))
  MOEJIT_LT(cublasLtCreate);
  MOEJIT_LT(cublasLtDestroy);
  MOEJIT_LT(cublasLtMatmulDescCreate);
  MOEJIT_LT(cublasLtMatmulDescDestroy);
  MOEJIT_LT(cublasLtMatmulDescSetAttribute);
  MOEJIT_LT(cublasLtMatrixLayoutCreate);
  MOEJIT_LT(cublasLtMatrixLayoutDestroy);
  MOEJIT_LT(cublasLtMatmulPreferenceCreate);
  MOEJIT_LT(cublasLtMatmulPreferenceDestroy);
  MOEJIT_LT(cublasLtMatmulPreferenceSetAttribute);
  MOEJIT_LT(cublasLtMatmulAlgoGetHeuristic);
  MOEJIT_LT(cublasLtMatmul);
#undef MOEJIT_LT
  if (!cublasLtCreate_fn || !cublasLtDestroy_fn || !cublasLtMatmulDescCreate_fn || !cublasLtMatmulDescDestroy_fn ||
      !cublasLtMatmulDescSetAttribute_fn || !cublasLtMatrixLayoutCreate_fn || !cublasLtMatrixLayoutDestroy_fn ||
      !cublasLtMatmulPreferenceCreate_fn || !cublasLtMatmulPreferenceDestroy_fn ||
      !cublasLtMatmulPreferenceSetAttribute_fn || !cublasLtMatmulAlgoGetHeuristic_fn || !cublasLtMatmul_fn) {
    *why = "cuBLASLt found but an entry point is missing";
    return 0;
  }
  const int n = 8192;
  const std::size_t elems = std::size_t(n) * n;
  // Random e4m3 codes over the whole range (never zeros), NaN codes (S.1111.111) moved to 448.
  std::vector<std::uint8_t> host(elems);
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  for (auto& b : host) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<std::uint8_t>(x >> 24);
    if ((b & 0x7f) == 0x7f) b ^= 1;
  }
  DeviceBuffer a(api, elems), b(api, elems), d(api, elems * 2), workspace(api, std::size_t(64) << 20);
  MOEJIT_CHECK_CU(api, Launch, cuMemcpyHtoD(a.ptr(), host.data(), elems));
  std::reverse(host.begin(), host.end());
  MOEJIT_CHECK_CU(api, Launch, cuMemcpyHtoD(b.ptr(), host.data(), elems));

  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  double rate = 0;
  auto fail = [&](const char* step, int status) { *why = fmt::format("cuBLASLt {} returned {}", step, status); };
  [&] {
    int st;
    if ((st = cublasLtCreate_fn(&handle)) != 0) return fail("create", st);
    if ((st = cublasLtMatmulDescCreate_fn(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)) != 0) return fail("desc", st);
    // fp8 wants A transposed ("TN"); fast accumulation = the tensor cores' own fp32 sums, the
    // ceiling a kernel without periodic promotion could reach.
    const cublasOperation_t trans = CUBLAS_OP_T, no_trans = CUBLAS_OP_N;
    const std::int8_t fast = 1;
    cublasLtMatmulDescSetAttribute_fn(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans));
    cublasLtMatmulDescSetAttribute_fn(desc, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans, sizeof(no_trans));
    cublasLtMatmulDescSetAttribute_fn(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast));
    if ((st = cublasLtMatrixLayoutCreate_fn(&la, CUDA_R_8F_E4M3, n, n, n)) != 0) return fail("layout A", st);
    if ((st = cublasLtMatrixLayoutCreate_fn(&lb, CUDA_R_8F_E4M3, n, n, n)) != 0) return fail("layout B", st);
    if ((st = cublasLtMatrixLayoutCreate_fn(&ld, CUDA_R_16BF, n, n, n)) != 0) return fail("layout D", st);
    if ((st = cublasLtMatmulPreferenceCreate_fn(&pref)) != 0) return fail("preference", st);
    const std::uint64_t ws_bytes = workspace.bytes();
    cublasLtMatmulPreferenceSetAttribute_fn(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes));
    cublasLtMatmulHeuristicResult_t algo{};
    int found = 0;
    st = cublasLtMatmulAlgoGetHeuristic_fn(handle, desc, la, lb, ld, ld, pref, 1, &algo, &found);
    if (st != 0 || found == 0) return fail("heuristic (no fp8 algorithm)", st);
    const float alpha = 1.f, beta = 0.f;
    EventTimer timer(api);
    std::vector<double> samples;
    for (int i = 0; i < 13; ++i) {
      const double ms = timer.time_ms(nullptr, [&] {
        st = cublasLtMatmul_fn(handle, desc, &alpha, reinterpret_cast<void*>(a.ptr()), la, reinterpret_cast<void*>(b.ptr()),
                               lb, &beta, reinterpret_cast<void*>(d.ptr()), ld, reinterpret_cast<void*>(d.ptr()), ld,
                               &algo.algo, reinterpret_cast<void*>(workspace.ptr()), ws_bytes, nullptr);
      });
      if (st != 0) return fail("matmul", st);
      if (i >= 3) samples.push_back(2.0 * n * n * double(n) / (ms * 1e-3));
    }
    rate = median_of(samples);
  }();
  if (pref) cublasLtMatmulPreferenceDestroy_fn(pref);
  for (auto* l : {la, lb, ld})
    if (l) cublasLtMatrixLayoutDestroy_fn(l);
  if (desc) cublasLtMatmulDescDestroy_fn(desc);
  if (handle) cublasLtDestroy_fn(handle);
  return rate;
}

}  // namespace moejit
