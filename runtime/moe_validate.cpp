// Checks of everything forward() is given, before any launch: which tensors, their dtypes, shapes,
// strides, alignment and null pointers, and the workspace size. One clear Error(Validate) each.
#include <fmt/format.h>

#include "common/error.h"
#include "runtime/moe_layer.h"
#include "runtime/moe_quant.h"
#include "jit/moe_names.h"

namespace moejit {

const char* scalar_type_name(ScalarType t) {
  switch (t) {
    case ScalarType::BF16: return "bf16";
    case ScalarType::F16: return "f16";
    case ScalarType::F32: return "f32";
    case ScalarType::I32: return "i32";
    case ScalarType::I8: return "i8";
    case ScalarType::U8: return "u8";
    case ScalarType::F8E4M3: return "f8e4m3";
  }
  return "?";
}

std::size_t scalar_type_size(ScalarType t) {
  switch (t) {
    case ScalarType::BF16:
    case ScalarType::F16: return 2;
    case ScalarType::F32:
    case ScalarType::I32: return 4;
    case ScalarType::I8:
    case ScalarType::U8:
    case ScalarType::F8E4M3: return 1;
  }
  return 0;
}

TensorView TensorView::contiguous(CUdeviceptr data, ScalarType dtype, const TensorShape& shape) {
  MOEJIT_REQUIRE(shape.size() >= 1 && shape.size() <= std::size_t(kMaxRank), "tensor view: rank {} must be in [1, {}]",
                 shape.size(), kMaxRank);
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.rank = static_cast<int>(shape.size());
  int i = 0;
  for (auto s : shape) v.shape[i++] = s;
  std::int64_t stride = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.strides[d] = stride;
    stride *= v.shape[d];
  }
  return v;
}

TensorView TensorView::rows(CUdeviceptr data, ScalarType dtype, std::int64_t count, std::int64_t cols,
                            std::int64_t row_stride) {
  TensorView v = contiguous(data, dtype, {count, cols});
  v.strides[0] = row_stride;
  return v;
}

std::string TensorView::describe() const {
  if (!given()) return "(not given)";
  std::string shape_text, stride_text;
  for (int d = 0; d < rank; ++d) {
    shape_text += fmt::format("{}{}", d ? ", " : "", shape[d]);
    stride_text += fmt::format("{}{}", d ? ", " : "", strides[d]);
  }
  return fmt::format("{}[{}] strides [{}] at 0x{:x}", scalar_type_name(dtype), shape_text, stride_text, data);
}

ScalarType scalar_type_of(MoeDType d) { return d == kDTypeBF16 ? ScalarType::BF16 : ScalarType::F16; }
ScalarType scalar_type_of(LogitType t) {
  return t == LogitType::F32 ? ScalarType::F32 : t == LogitType::BF16 ? ScalarType::BF16 : ScalarType::F16;
}

MoeForwardArgs contiguous_moe_args(const MoeSpec& s, int m, const MoeDevicePointers& p) {
  const ScalarType dt = scalar_type_of(s.dtype);
  const std::int64_t K = s.hidden, N = s.intermediate, R = s.w1_rows(), E = s.num_experts, EL = s.local_experts();
  const std::int64_t k = s.top_k;
  MoeForwardArgs a;
  auto view = [](CUdeviceptr ptr, ScalarType type, const TensorShape& shape) {
    return ptr ? TensorView::contiguous(ptr, type, shape) : TensorView{};
  };
  a.hidden = view(p.hidden, dt, {m, K});
  a.router_logits = view(p.router_logits, scalar_type_of(s.logit_dtype), {m, E});
  a.correction_bias = view(p.correction_bias, ScalarType::F32, {E});
  a.topk_ids = view(p.topk_ids, ScalarType::I32, {m, k});
  a.topk_weights = view(p.topk_weights, ScalarType::F32, {m, k});
  a.expert_map = view(p.expert_map, ScalarType::I32, {E});
  auto weight_views = [&](CUdeviceptr w, CUdeviceptr scale, CUdeviceptr zero, std::int64_t rows, std::int64_t cols,
                          TensorView& wv, TensorView& sv, TensorView& zv) {
    const QuantTensorLayout l = quant_weight_layout(s, EL, rows, cols);
    wv = view(w, l.weight_type, l.weight_shape);
    if (l.has_scale) sv = view(scale, l.scale_type, l.scale_shape);
    if (l.has_zero) zv = view(zero, ScalarType::U8, l.scale_shape);
  };
  weight_views(p.w1, p.w1_scale, p.w1_zero, R, K, a.w1, a.w1_scale, a.w1_zero);
  weight_views(p.w2, p.w2_scale, p.w2_zero, K, N, a.w2, a.w2_scale, a.w2_zero);
  a.a1_scale = view(p.a1_scale, ScalarType::F32, {1});
  a.a2_scale = view(p.a2_scale, ScalarType::F32, {1});
  a.b1 = view(p.b1, ScalarType::F32, {EL, R});
  a.b2 = view(p.b2, ScalarType::F32, {EL, K});
  a.out = view(p.out, dt, {m, K});
  a.workspace = p.workspace;
  a.workspace_size = p.workspace_size;
  return a;
}

namespace {

// Checks a tensor: given, dtype, exact shape (-1 = any), innermost stride 1, every other stride at
// least the extent it spans (no overlap), byte alignment of the pointer and of the row strides.
void check_tensor(const char* name, const TensorView& v, ScalarType dtype, const TensorShape& shape,
                  std::size_t align_bytes) {
  MOEJIT_REQUIRE(v.given(), "moe: {} is required but was not given", name);
  const std::string what = fmt::format("moe: {} {}", name, v.describe());
  MOEJIT_REQUIRE(v.dtype == dtype, "{}: dtype must be {}", what, scalar_type_name(dtype));
  MOEJIT_REQUIRE(v.rank == int(shape.size()), "{}: rank must be {}", what, shape.size());
  int d = 0;
  for (auto want : shape) {
    MOEJIT_REQUIRE(v.shape[d] >= 0, "{}: negative extent", what);
    MOEJIT_REQUIRE(want < 0 || v.shape[d] == want, "{}: dimension {} must be {}", what, d, want);
    ++d;
  }
  MOEJIT_REQUIRE(v.strides[v.rank - 1] == 1, "{}: the innermost dimension must be contiguous (stride 1)", what);
  std::int64_t span = v.shape[v.rank - 1];
  for (int i = v.rank - 2; i >= 0; --i) {
    MOEJIT_REQUIRE(v.strides[i] >= span, "{}: stride {} of dimension {} overlaps the {} elements inside it", what,
                   v.strides[i], i, span);
    MOEJIT_REQUIRE(v.strides[i] * scalar_type_size(dtype) % align_bytes == 0,
                   "{}: stride of dimension {} must be a multiple of {} bytes", what, i, align_bytes);
    span = v.strides[i] * v.shape[i];
  }
  bool empty = false;
  for (int i = 0; i < v.rank; ++i) empty = empty || v.shape[i] == 0;
  MOEJIT_REQUIRE(empty || v.data != 0, "{}: null pointer", what);
  MOEJIT_REQUIRE(v.data % align_bytes == 0, "{}: pointer must be {}-byte aligned", what, align_bytes);
}

bool zero_points_match_scales_needed(const MoeSpec& s) { return s.quant == kQuantInt4Group && s.quant_zero_points; }

}  // namespace

void MoeLayer::check(const MoeForwardArgs& a) const {
  const MoeSpec& s = spec_;
  const ScalarType dt = scalar_type_of(s.dtype);
  const std::int64_t K = s.hidden, N = s.intermediate, E = s.num_experts, EL = s.local_experts(), k = s.top_k;
  // 16-byte rows: cp.async copies 16 bytes; out is written 8 bytes (4 elements) at a time.
  check_tensor("hidden", a.hidden, dt, {-1, K}, 16);
  const std::int64_t m = a.hidden.shape[0];
  MOEJIT_REQUIRE(m * k < (std::int64_t(1) << 31), "moe: num_tokens * top_k = {} exceeds int32 indexing", m * k);
  if (s.quant == kQuantFp8Block) {  // moe_act_quant and the wgmma kernels index (row, 128-column group) in 32 bits
    const auto groups = [](std::int64_t cols) { return (cols + kQuantFp8BlockSize - 1) / kQuantFp8BlockSize; };
    const std::int64_t rows = static_cast<std::int64_t>(router_.sorter().gather_capacity(static_cast<int>(m)));
    for (const auto& [r, g] : {std::pair{m, groups(K)}, std::pair{rows, groups(N)}})
      MOEJIT_REQUIRE(r * g < (std::int64_t(1) << 30), "moe: {} x {} activation groups exceed the int range", r, g);
  }
  check_tensor("out", a.out, dt, {m, K}, 8);
  auto check_weight = [&](const char* name, const char* scale_name, const char* zero_name, const TensorView& w,
                          const TensorView& scale, const TensorView& zero, std::int64_t rows, std::int64_t cols) {
    const QuantTensorLayout l = quant_weight_layout(s, EL, rows, cols);
    check_tensor(name, w, l.weight_type, l.weight_shape, 16);
    if (l.has_scale) check_tensor(scale_name, scale, l.scale_type, l.scale_shape, scalar_type_size(l.scale_type));
    else MOEJIT_REQUIRE(!scale.given(), "moe: {} was given but quant {} has no weight scales", scale_name, quant_name(s.quant));
    if (l.has_zero) check_tensor(zero_name, zero, ScalarType::U8, l.scale_shape, 1);
    else MOEJIT_REQUIRE(!zero.given(), "moe: {} was given but the spec has no zero points (quant_zero_points)", zero_name);
    if (l.has_scale)  // the kernel walks scale rows and groups with the scale view's strides
      MOEJIT_REQUIRE(scale.rank < 3 || scale.strides[2] == 1, "moe: {} must be contiguous in its last dimension", scale_name);
  };
  check_weight("w1", "w1_scale", "w1_zero", a.w1, a.w1_scale, a.w1_zero, s.w1_rows(), K);
  check_weight("w2", "w2_scale", "w2_zero", a.w2, a.w2_scale, a.w2_zero, K, N);
  if (zero_points_match_scales_needed(s)) {
    MOEJIT_REQUIRE(a.w1_zero.strides == a.w1_scale.strides && a.w2_zero.strides == a.w2_scale.strides,
                   "moe: zero points must have the strides of their scales (the kernel indexes both alike)");
  }
  if (s.quant == kQuantFp8Tensor) {
    check_tensor("a1_scale", a.a1_scale, ScalarType::F32, {1}, 4);
    check_tensor("a2_scale", a.a2_scale, ScalarType::F32, {1}, 4);
  } else {
    MOEJIT_REQUIRE(!a.a1_scale.given() && !a.a2_scale.given(),
                   "moe: a1_scale / a2_scale (static activation scales) apply to fp8_tensor only");
  }
  if (s.has_bias) {
    check_tensor("b1", a.b1, ScalarType::F32, {EL, s.w1_rows()}, 4);
    check_tensor("b2", a.b2, ScalarType::F32, {EL, K}, 4);
  } else {
    MOEJIT_REQUIRE(!a.b1.given() && !a.b2.given(), "moe: biases were given but the spec says has_bias = false");
  }
  const bool logits = a.router_logits.given();
  const bool modular = a.topk_ids.given() || a.topk_weights.given();
  MOEJIT_REQUIRE(logits != modular,
                 "moe: give either router_logits (monolithic forward) or topk_ids + topk_weights (modular), not {}",
                 logits ? "both" : "neither");
  if (logits) {
    check_tensor("router_logits", a.router_logits, scalar_type_of(s.logit_dtype), {m, E}, scalar_type_size(scalar_type_of(s.logit_dtype)));
    if (a.correction_bias.given()) check_tensor("correction_bias", a.correction_bias, ScalarType::F32, {E}, 4);
  } else {
    check_tensor("topk_ids", a.topk_ids, ScalarType::I32, {m, k}, 4);
    check_tensor("topk_weights", a.topk_weights, ScalarType::F32, {m, k}, 4);
    MOEJIT_REQUIRE(a.topk_ids.strides[0] == k && a.topk_weights.strides[0] == k,
                   "moe: topk_ids and topk_weights must be contiguous [num_tokens, top_k]");
    MOEJIT_REQUIRE(!a.correction_bias.given(), "moe: correction_bias only applies to router logits");
  }
  if (EL < E) check_tensor("expert_map", a.expert_map, ScalarType::I32, {E}, 4);
  else if (a.expert_map.given()) check_tensor("expert_map", a.expert_map, ScalarType::I32, {E}, 4);
  if (m > 0) {
    const std::size_t need = workspace_bytes(static_cast<int>(m));
    MOEJIT_REQUIRE(a.workspace != 0 && a.workspace % 256 == 0, "moe: workspace must be non-null and 256-byte aligned");
    MOEJIT_REQUIRE(a.workspace_size >= need, "moe: workspace of {} bytes is smaller than the {} bytes {} tokens need",
                   a.workspace_size, need, m);
  }
}

}  // namespace moejit
