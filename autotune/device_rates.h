// The ceilings a floor is computed from, measured on the device: copy bandwidth and the dense bf16
// and fp8 GEMM rates (cuBLAS / cuBLASLt, dlopen'd, when the machine has them). Shared by the bench
// and the tuner.
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

// Dense fp8 e4m3 GEMM rate (flop/s; A^T B, bf16 out, fp32 sums with fast accumulation) of cuBLASLt
// on 8192^3 random codes, median of 10: the ceiling of w8a8 layers. 0 and `why` when no cuBLASLt is
// found or it has no fp8 algorithm for the device (fp8 needs sm_89+).
double measure_fp8_gemm_rate(DriverApi& api, std::string* why);

}  // namespace moejit
