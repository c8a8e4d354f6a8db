// Shared pieces of moejit_bench: event timing, medians, and the two ceilings measured on the device
// in the same run (copy bandwidth; dense bf16 GEMM rate through cuBLAS when the machine has it).
#pragma once

#include <cuda.h>

#include <functional>
#include <string>
#include <vector>

#include "runtime/device_fill.h"
#include "runtime/driver.h"

namespace moejit::bench {

double median(std::vector<double> v);

// Bytes read + written per second by a large device-to-device copy.
double measure_copy_bandwidth(DriverApi& api);

// Dense bf16 GEMM rate (flop/s, fp32 accumulation) of cuBLAS on 8192^3, loaded with dlopen; 0 and
// `why` when no cuBLAS is found (MOEJIT_CUBLAS names the library explicitly).
double measure_gemm_rate(DriverApi& api, DeviceFiller& filler, std::string* why);

// Captures `inner` calls of `body` into one CUDA graph and returns the median over `reps` replays of
// (replay time / inner), in microseconds, after 3 warm-up replays.
double time_graph_us(DriverApi& api, CUstream stream, int inner, int reps, const std::function<void(int)>& body);

}  // namespace moejit::bench
