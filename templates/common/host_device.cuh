// Marks small constexpr helpers that both the host (g++) and the kernels (NVRTC) call.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define MOEJIT_HOST_DEVICE __host__ __device__
#else
#define MOEJIT_HOST_DEVICE
#endif
