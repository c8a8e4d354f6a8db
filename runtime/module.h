// A loaded cubin (CUmodule) and its kernels: resource report from the driver, typed launch on the
// caller's stream.
#pragma once

#include <cuda.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/driver.h"

namespace moejit {

struct KernelResources {
  int registers = 0;
  int static_shared_bytes = 0;
  int local_bytes = 0;  // per thread: spills and stack
  int const_bytes = 0;
  int max_threads_per_block = 0;
  int ptx_version = 0;
  int binary_version = 0;
};

struct LaunchShape {
  unsigned grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned block_x = 1, block_y = 1, block_z = 1;
  unsigned dynamic_shared_bytes = 0;
  // Programmatic dependent launch (sm_90+): the kernel may start while the previous kernel on the
  // stream finishes; it must execute griddepcontrol.wait before touching that kernel's output.
  bool overlap_previous = false;
  // Thread-block clusters along x (sm_90+): grid_x must be a multiple of it; 1 = none.
  unsigned cluster_x = 1;
};

class Kernel {
 public:
  Kernel(std::shared_ptr<DriverApi> api, CUfunction fn, std::string name);
  const std::string& name() const { return name_; }
  const KernelResources& resources() const { return resources_; }
  CUfunction function() const { return fn_; }

  // Launches with the arguments by value, as the kernel declares them. Checks the launch shape
  // against the kernel's limits first; raises the dynamic shared-memory limit when asked for more
  // than the default 48 KiB.
  template <typename... Args>
  void launch(CUstream stream, const LaunchShape& shape, const Args&... args) const {
    void* params[] = {const_cast<void*>(static_cast<const void*>(&args))..., nullptr};
    launch_raw(stream, shape, params);
  }
  void launch_raw(CUstream stream, const LaunchShape& shape, void** params) const;
  // Clusters of shape.cluster_x CTAs (block and dynamic shared memory as in shape) the device can
  // hold at once (cuOccupancyMaxActiveClusters): a persistent grid of clusters larger than that
  // would run in waves.
  int max_active_clusters(const LaunchShape& shape) const;

 private:
  std::shared_ptr<DriverApi> api_;
  CUfunction fn_;
  std::string name_;
  KernelResources resources_;
  mutable int dynamic_shared_limit_ = 0;  // dynamic bytes allowed now (set in the constructor)
  void allow_dynamic_shared(unsigned bytes) const;  // raises the limit where asked for more
  // The driver's launch configuration for shape (attributes stored in `attributes`, at least 2).
  CUlaunchConfig launch_config(CUstream stream, const LaunchShape& shape, CUlaunchAttribute* attributes) const;
};

class Module {
 public:
  // `entries` maps short names ("count") to lowered names. Throws Error(Load) when the driver rejects
  // the cubin (the caller may then drop the cache entry and rebuild).
  Module(std::shared_ptr<DriverApi> api, const std::string& cubin,
         const std::map<std::string, std::string>& entries);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const Kernel& kernel(const std::string& name) const;  // throws Error(Load) naming known entries
  const Kernel* find_kernel(const std::string& name) const;  // null where the module has none of that name
  std::vector<std::string> kernel_names() const;

 private:
  std::shared_ptr<DriverApi> api_;
  CUmodule module_ = nullptr;
  std::map<std::string, Kernel> kernels_;
};

}  // namespace moejit
