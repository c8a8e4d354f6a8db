// Device query and the arch a device's kernels are compiled for.
#pragma once

#include <cuda.h>

#include <memory>
#include <string>

#include "runtime/driver.h"

namespace moejit {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int max_shared_per_block_optin = 0;  // bytes a kernel may ask for after raising its limit
  int shared_per_sm = 0;
  int l2_bytes = 0;
  int clock_khz = 0;
  int memory_clock_khz = 0;
  int memory_bus_bits = 0;
  std::size_t total_memory = 0;
  std::string arch() const;  // arch_for_compute_capability(cc_major, cc_minor)
};

// sm_90a on 9.0 and sm_100a on 10.0 (the arch-specific features: wgmma, tcgen05), else sm_<XY>.
std::string arch_for_compute_capability(int major, int minor);

// A device with its primary context retained for the object's lifetime.
class Device {
 public:
  Device(std::shared_ptr<DriverApi> api, int ordinal);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const { return info_; }
  CUcontext context() const { return context_; }
  void make_current() const;  // binds the primary context to the calling thread
  DriverApi& api() const { return *api_; }

 private:
  std::shared_ptr<DriverApi> api_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  DeviceInfo info_;
};

}  // namespace moejit
