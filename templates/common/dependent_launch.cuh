// Programmatic dependent launch (sm_90+; no-ops below). A kernel launched with
// LaunchShape::overlap_previous may start while the previous kernel on the stream finishes: it must
// call wait() before it reads (or overwrites) anything an earlier kernel touches. A kernel calls
// launch_dependents() to let the next such kernel start its launch (CTA scheduling, prologue) now;
// the next kernel still waits for this one's completion on the device.
#pragma once

namespace moejit {
namespace pdl {

__device__ inline void wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ inline void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace pdl
}  // namespace moejit
