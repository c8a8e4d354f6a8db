// The tensor map (CUtensorMap) through which the persistent wgmma kernel's copy engine reads an
// expert weight tensor: the weights as bytes [E_local][rows][inner bytes] with their own strides,
// boxes of 128 bytes x box_rows rows in the 128-byte swizzle the kernel's wgmma descriptors read.
#pragma once

#include "moe/moe_gemm_args.cuh"
#include "runtime/driver.h"
#include "runtime/tensor_view.h"

namespace moejit {

// A CUtensorMap's 128 bytes, as MoeGemmArgs::b_tensor_map holds them.
struct WeightTensorMap {
  alignas(64) unsigned long long bytes[16] = {};
};

// The map of weights w ([E_local, rows, inner], strides in elements, rows 16-byte aligned) whose
// reduction runs over inner_bytes bytes of each row. Throws Error(Launch) with the driver's words
// when it refuses (e.g. a stride that is not a multiple of 16 bytes).
WeightTensorMap encode_weight_tensor_map(const DriverApi& api, const TensorView& w, long long inner_bytes, int box_rows);

}  // namespace moejit
