#include "runtime/tile_tensor_map.h"

#include <fmt/format.h>

#include <cstring>

namespace moejit {

TileTensorMap encode_tile_tensor_map(const DriverApi& api, const TensorView& t, long long inner_bytes, int box_rows,
                                     int row_step) {
  // Copied as bytes: the copy engine wants the map 64-byte aligned where the kernel reads it (its
  // parameter), which MoeGemmArgs' alignas gives.
  static_assert(sizeof(TileTensorMap::bytes) == sizeof(CUtensorMap) &&
                    sizeof(MoeGemmArgs::b_tensor_map) == sizeof(CUtensorMap) && alignof(MoeGemmArgs) >= 64,
                "MoeGemmArgs::b_tensor_map holds a CUtensorMap");
  const long long es = static_cast<long long>(scalar_type_size(t.dtype));
  // Dims innermost first: bytes of a row, rows of an expert, experts. Strides of dims 1 and 2 in
  // bytes (dim 0 is contiguous).
  const cuuint64_t dims[3] = {cuuint64_t(inner_bytes), cuuint64_t(t.shape[1]), cuuint64_t(t.shape[0])};
  const cuuint64_t strides[2] = {cuuint64_t(t.strides[1] * es), cuuint64_t(t.strides[0] * es)};
  // A box spans box_rows * row_step rows and loads every row_step-th of them.
  const cuuint32_t box[3] = {128, cuuint32_t(box_rows * row_step), 1};
  const cuuint32_t element_strides[3] = {1, cuuint32_t(row_step), 1};
  CUtensorMap map;
  const CUresult r = api.cuTensorMapEncodeTiled(
      &map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, reinterpret_cast<void*>(t.data), dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(Phase::Launch,
                fmt::format("moe: cuTensorMapEncodeTiled refused a tile source (inner {} bytes, {} rows, {} matrices, "
                            "strides {} / {} bytes, box {} rows, step {}): {}",
                            inner_bytes, t.shape[1], t.shape[0], strides[0], strides[1], box_rows, row_step,
                            api.error_name(r)));
  TileTensorMap out;
  std::memcpy(out.bytes, &map, sizeof(map));
  return out;
}

}  // namespace moejit
