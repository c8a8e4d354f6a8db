// A non-owning view of a device tensor: pointer, element type, shape and strides (in elements).
// The MoE layer checks every view it is given before launching anything.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace moejit {

// I8: int8 weights; U8: packed 4-bit weights, e8m0 scales, zero points; F8E4M3: fp8 weights.
enum class ScalarType { BF16, F16, F32, I32, I8, U8, F8E4M3 };

const char* scalar_type_name(ScalarType t);
std::size_t scalar_type_size(ScalarType t);

// A shape of rank <= 3 held by value: the layer checks shapes on every forward, without allocating.
// A list longer than 3 keeps its rank (so TensorView::contiguous reports it) but only 3 extents.
struct TensorShape {
  std::array<std::int64_t, 3> dims{};
  int rank = 0;
  TensorShape() = default;
  TensorShape(std::initializer_list<std::int64_t> extents) : rank(static_cast<int>(extents.size())) {
    int i = 0;
    for (auto e : extents)
      if (i < 3) dims[i++] = e;
  }
  std::size_t size() const { return static_cast<std::size_t>(rank); }
  std::int64_t operator[](int i) const { return dims[i]; }
  const std::int64_t* begin() const { return dims.data(); }
  const std::int64_t* end() const { return dims.data() + std::min(rank, 3); }
};

struct TensorView {
  static constexpr int kMaxRank = 3;
  CUdeviceptr data = 0;
  ScalarType dtype = ScalarType::BF16;
  int rank = 0;  // 0 = not given
  std::array<std::int64_t, kMaxRank> shape{};
  std::array<std::int64_t, kMaxRank> strides{};

  bool given() const { return rank > 0; }
  // Row-major contiguous view.
  static TensorView contiguous(CUdeviceptr data, ScalarType dtype, const TensorShape& shape);
  // Same, with an explicit stride (elements) between rows of the first dimension (rank 2).
  static TensorView rows(CUdeviceptr data, ScalarType dtype, std::int64_t count, std::int64_t cols,
                         std::int64_t row_stride);
  std::string describe() const;  // "bf16[64, 2048] strides [2048, 1]"
};

}  // namespace moejit
