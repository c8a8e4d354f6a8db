// RAII device memory for tests, examples, benchmarks and the CLI demo (the MoE layer itself never
// allocates: callers hand it workspace).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <vector>

#include "runtime/driver.h"

namespace moejit {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DriverApi& api, std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr ptr() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const { return reinterpret_cast<T*>(ptr_); }

  void upload(const void* host, std::size_t bytes, std::size_t offset = 0);
  void download(void* host, std::size_t bytes, std::size_t offset = 0) const;
  void fill_u32(unsigned int value);  // e.g. a poison pattern

  template <typename T>
  static DeviceBuffer from(DriverApi& api, const std::vector<T>& host) {
    DeviceBuffer b(api, std::max<std::size_t>(1, host.size() * sizeof(T)));
    if (!host.empty()) b.upload(host.data(), host.size() * sizeof(T));
    return b;
  }
  template <typename T>
  std::vector<T> to_vector(std::size_t count) const {
    std::vector<T> out(count);
    if (count) download(out.data(), count * sizeof(T));
    return out;
  }

 private:
  DriverApi* api_ = nullptr;
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
};

}  // namespace moejit
