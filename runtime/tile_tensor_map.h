// The tensor maps (CUtensorMap) through which the persistent wgmma kernel's copy engine reads its
// tiles: a tensor as bytes [E_local or 1][rows][inner bytes] with its own strides (the expert
// weights; GEMM2's intermediate), boxes of 128 bytes x box_rows rows in the 128-byte swizzle the
// kernel's wgmma descriptors read.
#pragma once

#include "moe/moe_gemm_args.cuh"
#include "runtime/driver.h"
#include "runtime/tensor_view.h"

namespace moejit {

// A CUtensorMap's 128 bytes, as MoeGemmArgs::a_tensor_map / b_tensor_map hold them.
struct TileTensorMap {
  alignas(64) unsigned long long bytes[16] = {};
};

// The map of t ([E_local or 1, rows, inner], strides in elements, rows 16-byte aligned) whose
// reduction runs over inner_bytes bytes of each row; a box takes box_rows rows, every row_step-th
// (2: one half of interleaved gate / up rows). Throws Error(Launch) with the driver's words
// when it refuses (e.g. a stride that is not a multiple of 16 bytes).
TileTensorMap encode_tile_tensor_map(const DriverApi& api, const TensorView& t, long long inner_bytes, int box_rows,
                                     int row_step = 1);

}  // namespace moejit
