#include "runtime/device.h"

namespace moejit {

std::string arch_for_compute_capability(int major, int minor) {
  if ((major == 9 || major == 10) && minor == 0) return fmt::format("sm_{}{}a", major, minor);
  return fmt::format("sm_{}{}", major, minor);
}

std::string DeviceInfo::arch() const { return arch_for_compute_capability(cc_major, cc_minor); }

Device::Device(std::shared_ptr<DriverApi> api, int ordinal) : api_(std::move(api)) {
  auto& a = *api_;
  int count = 0;
  MOEJIT_CHECK_CU(a, Driver, cuDeviceGetCount(&count));
  if (ordinal < 0 || ordinal >= count)
    throw Error(Phase::Driver, fmt::format("GPU {} does not exist (this machine has {})", ordinal, count));
  MOEJIT_CHECK_CU(a, Driver, cuDeviceGet(&device_, ordinal));
  MOEJIT_CHECK_CU(a, Driver, cuDevicePrimaryCtxRetain(&context_, device_));
  info_.ordinal = ordinal;
  char name[256] = {};
  MOEJIT_CHECK_CU(a, Driver, cuDeviceGetName(name, sizeof(name), device_));
  info_.name = name;
  auto attr = [&](CUdevice_attribute what) {
    int v = 0;
    MOEJIT_CHECK_CU(a, Driver, cuDeviceGetAttribute(&v, what, device_));
    return v;
  };
  info_.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  info_.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  info_.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  info_.max_shared_per_block_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  info_.shared_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  info_.l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  info_.clock_khz = attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  info_.memory_clock_khz = attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
  info_.memory_bus_bits = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  MOEJIT_CHECK_CU(a, Driver, cuDeviceTotalMem(&info_.total_memory, device_));
}

Device::~Device() {
  if (context_ != nullptr) api_->cuDevicePrimaryCtxRelease(device_);
}

void Device::make_current() const { MOEJIT_CHECK_CU(*api_, Driver, cuCtxSetCurrent(context_)); }

}  // namespace moejit
