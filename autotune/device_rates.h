// The two ceilings a floor is computed from, measured on the device: copy bandwidth and the dense
// bf16 GEMM rate (cuBLAS, dlopen'd, when the machine has it). Shared by the bench and the tuner.
#pragma once

#include <string>

#include "runtime/device_fill.h"
#include "runtime/driver.h"

namespace moejit {

// Bytes read + written per second by a large device-to-device copy (median of 10).
double measure_copy_bandwidth(DriverApi& api);

// Dense bf16 GEMM rate (flop/s, fp32 accumulation) of cuBLAS on 8192^3 random inputs, median of 10;
// 0 and `why` when no cuBLAS is found (MOEJIT_CUBLAS names the library explicitly).
double measure_gemm_rate(DriverApi& api, DeviceFiller& filler, std::string* why);

}  // namespace moejit
