#include "runtime/module.h"

#include <algorithm>

namespace moejit {

namespace {
constexpr int kDefaultSharedBytes = 48 * 1024;
}  // namespace

Kernel::Kernel(std::shared_ptr<DriverApi> api, CUfunction fn, std::string name)
    : api_(std::move(api)), fn_(fn), name_(std::move(name)) {
  auto attr = [&](CUfunction_attribute what) {
    int v = 0;
    MOEJIT_CHECK_CU(*api_, Load, cuFuncGetAttribute(&v, what, fn_));
    return v;
  };
  resources_.registers = attr(CU_FUNC_ATTRIBUTE_NUM_REGS);
  resources_.static_shared_bytes = attr(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
  // Without opting in, static + dynamic shared memory must fit in 48 KiB; what a kernel may ask for
  // dynamically before raising its limit is what its static part leaves (a kernel with 1.5 KiB of
  // static arrays and exactly 48 KiB dynamic failed to launch with CUDA_ERROR_INVALID_VALUE).
  dynamic_shared_limit_ = std::max(0, kDefaultSharedBytes - resources_.static_shared_bytes);
  resources_.local_bytes = attr(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
  resources_.const_bytes = attr(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES);
  resources_.max_threads_per_block = attr(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  resources_.ptx_version = attr(CU_FUNC_ATTRIBUTE_PTX_VERSION);
  resources_.binary_version = attr(CU_FUNC_ATTRIBUTE_BINARY_VERSION);
}

void Kernel::launch_raw(CUstream stream, const LaunchShape& s, void** params) const {
  const unsigned threads = s.block_x * s.block_y * s.block_z;
  if (threads == 0 || threads > static_cast<unsigned>(resources_.max_threads_per_block))
    throw Error(Phase::Launch, fmt::format("{}: {} threads per block, the kernel allows 1..{}", name_, threads,
                                           resources_.max_threads_per_block));
  if (s.grid_x == 0 || s.grid_y == 0 || s.grid_z == 0)
    throw Error(Phase::Launch, fmt::format("{}: empty grid {}x{}x{}", name_, s.grid_x, s.grid_y, s.grid_z));
  if (s.cluster_x == 0 || s.grid_x % s.cluster_x != 0)
    throw Error(Phase::Launch, fmt::format("{}: grid x {} is not a multiple of the cluster's {} CTAs", name_, s.grid_x,
                                           s.cluster_x));
  allow_dynamic_shared(s.dynamic_shared_bytes);
  if (s.overlap_previous || s.cluster_x > 1) {
    CUlaunchAttribute attributes[2];
    const CUlaunchConfig config = launch_config(stream, s, attributes);
    MOEJIT_CHECK_CU(*api_, Launch, cuLaunchKernelEx(&config, fn_, params, nullptr));
    return;
  }
  MOEJIT_CHECK_CU(*api_, Launch,
                  cuLaunchKernel(fn_, s.grid_x, s.grid_y, s.grid_z, s.block_x, s.block_y, s.block_z,
                                 s.dynamic_shared_bytes, stream, params, nullptr));
}

void Kernel::allow_dynamic_shared(unsigned bytes) const {
  if (static_cast<int>(bytes) <= dynamic_shared_limit_) return;
  const CUresult r = api_->cuFuncSetAttribute(fn_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(bytes));
  if (r != CUDA_SUCCESS)
    throw Error(Phase::Launch, fmt::format("{}: {} bytes of dynamic shared memory (+ {} static) exceed what the "
                                           "device allows: {}", name_, bytes, resources_.static_shared_bytes,
                                           api_->error_name(r)));
  dynamic_shared_limit_ = static_cast<int>(bytes);
}

CUlaunchConfig Kernel::launch_config(CUstream stream, const LaunchShape& s, CUlaunchAttribute* attributes) const {
  CUlaunchConfig config{};
  config.gridDimX = s.grid_x;
  config.gridDimY = s.grid_y;
  config.gridDimZ = s.grid_z;
  config.blockDimX = s.block_x;
  config.blockDimY = s.block_y;
  config.blockDimZ = s.block_z;
  config.sharedMemBytes = s.dynamic_shared_bytes;
  config.hStream = stream;
  config.attrs = attributes;
  config.numAttrs = 0;
  if (s.overlap_previous) {
    CUlaunchAttribute& a = attributes[config.numAttrs++];
    a = CUlaunchAttribute{};
    a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    a.value.programmaticStreamSerializationAllowed = 1;
  }
  if (s.cluster_x > 1) {
    CUlaunchAttribute& a = attributes[config.numAttrs++];
    a = CUlaunchAttribute{};
    a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a.value.clusterDim.x = s.cluster_x;
    a.value.clusterDim.y = 1;
    a.value.clusterDim.z = 1;
  }
  return config;
}

int Kernel::max_active_clusters(const LaunchShape& s) const {
  allow_dynamic_shared(s.dynamic_shared_bytes);
  CUlaunchAttribute attributes[2];
  const CUlaunchConfig config = launch_config(nullptr, s, attributes);
  int clusters = 0;
  MOEJIT_CHECK_CU(*api_, Launch, cuOccupancyMaxActiveClusters(&clusters, fn_, &config));
  return clusters;
}

Module::Module(std::shared_ptr<DriverApi> api, const std::string& cubin,
               const std::map<std::string, std::string>& entries)
    : api_(std::move(api)) {
  MOEJIT_CHECK_CU(*api_, Load, cuModuleLoadData(&module_, cubin.data()));
  for (const auto& [name, lowered] : entries) {
    CUfunction fn = nullptr;
    CUresult r = api_->cuModuleGetFunction(&fn, module_, lowered.c_str());
    if (r != CUDA_SUCCESS) {
      api_->cuModuleUnload(module_);
      throw Error(Phase::Load, fmt::format("entry '{}' ({}) not found in the module: {}", name, lowered,
                                           api_->error_name(r)));
    }
    kernels_.emplace(name, Kernel(api_, fn, name));
  }
}

Module::~Module() {
  if (module_ != nullptr) api_->cuModuleUnload(module_);
}

const Kernel& Module::kernel(const std::string& name) const {
  auto it = kernels_.find(name);
  if (it == kernels_.end())
    throw Error(Phase::Load, fmt::format("module has no kernel '{}' (has: {})", name, fmt::join(kernel_names(), ", ")));
  return it->second;
}

const Kernel* Module::find_kernel(const std::string& name) const {
  auto it = kernels_.find(name);
  return it == kernels_.end() ? nullptr : &it->second;
}

std::vector<std::string> Module::kernel_names() const {
  std::vector<std::string> out;
  for (const auto& [name, k] : kernels_) out.push_back(name);
  return out;
}

}  // namespace moejit
