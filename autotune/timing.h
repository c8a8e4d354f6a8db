// Timing helpers shared by the tuner and the bench: medians and CUDA-graph replays.
#pragma once

#include <cuda.h>

#include <functional>
#include <vector>

#include "runtime/driver.h"

namespace moejit {

double median(std::vector<double> v);

// Captures `inner` calls of `body(i)` into one CUDA graph and returns the median over `reps`
// replays of (replay time / inner), in microseconds, after 3 warm-up replays.
double time_graph_us(DriverApi& api, CUstream stream, int inner, int reps, const std::function<void(int)>& body);

}  // namespace moejit
