#include "runtime/device_buffer.h"

#include <utility>

namespace moejit {

DeviceBuffer::DeviceBuffer(DriverApi& api, std::size_t bytes) : api_(&api), bytes_(bytes) {
  MOEJIT_CHECK_CU(api, Launch, cuMemAlloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != 0) api_->cuMemFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : api_(o.api_), ptr_(std::exchange(o.ptr_, 0)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ != 0) api_->cuMemFree(ptr_);
    api_ = o.api_;
    ptr_ = std::exchange(o.ptr_, 0);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, std::size_t bytes, std::size_t offset) {
  if (offset + bytes > bytes_) throw Error(Phase::Launch, fmt::format("upload of {} bytes at {} overruns a {}-byte buffer", bytes, offset, bytes_));
  MOEJIT_CHECK_CU(*api_, Launch, cuMemcpyHtoD(ptr_ + offset, host, bytes));
}

void DeviceBuffer::download(void* host, std::size_t bytes, std::size_t offset) const {
  if (offset + bytes > bytes_) throw Error(Phase::Launch, fmt::format("download of {} bytes at {} overruns a {}-byte buffer", bytes, offset, bytes_));
  MOEJIT_CHECK_CU(*api_, Launch, cuMemcpyDtoH(host, ptr_ + offset, bytes));
}

void DeviceBuffer::fill_u32(unsigned int value) {
  MOEJIT_CHECK_CU(*api_, Launch, cuMemsetD32(ptr_, value, bytes_ / 4));
}

}  // namespace moejit
