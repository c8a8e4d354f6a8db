// Times device work on a stream with a pair of CUDA events (for the bench, the tuner and the
// device-rate measurements).
#pragma once

#include <cuda.h>

#include "common/error.h"
#include "runtime/driver.h"

namespace moejit {

class EventTimer {
 public:
  explicit EventTimer(DriverApi& api) : api_(api) {
    MOEJIT_CHECK_CU(api_, Launch, cuEventCreate(&start_, CU_EVENT_DEFAULT));
    MOEJIT_CHECK_CU(api_, Launch, cuEventCreate(&stop_, CU_EVENT_DEFAULT));
  }
  ~EventTimer() {
    api_.cuEventDestroy(start_);
    api_.cuEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  void start(CUstream stream) { MOEJIT_CHECK_CU(api_, Launch, cuEventRecord(start_, stream)); }
  void stop(CUstream stream) { MOEJIT_CHECK_CU(api_, Launch, cuEventRecord(stop_, stream)); }
  // Waits for the stop event; milliseconds between the two.
  double ms() {
    MOEJIT_CHECK_CU(api_, Launch, cuEventSynchronize(stop_));
    float ms = 0;
    MOEJIT_CHECK_CU(api_, Launch, cuEventElapsedTime(&ms, start_, stop_));
    return ms;
  }
  template <typename Body>
  double time_ms(CUstream stream, Body&& body) {
    start(stream);
    body();
    stop(stream);
    return ms();
  }

 private:
  DriverApi& api_;
  CUevent start_ = nullptr, stop_ = nullptr;
};

}  // namespace moejit
