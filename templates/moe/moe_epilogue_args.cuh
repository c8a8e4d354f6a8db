// Arguments of the stand-alone MoE stages: the activation kernel (unfused mode) and the top-k sum /
// fp32 -> DTYPE cast that end a forward. Plain C++ only: the host includes this header too.
#pragma once

namespace moejit {

struct MoeActivationArgs {
  const void* in;            // [padded rows, ld_in] DTYPE: GEMM1 output without activation
  long long ld_in;
  void* out;                 // [padded rows, ld_out] DTYPE: the intermediate
  long long ld_out;
  int n_out;                 // N; gated activations read 2N inputs per row (halves or interleaved)
  const int* gather_index;   // [padded rows]; rows with -1 (padding) are skipped
  const int* totals;         // routing totals: [1] = padded rows
  int max_rows;              // host bound on padded rows (grid size)
  float alpha;
  float limit;
};

// GEMM1's A rows gathered into padded-row order (moe_gather_rows_kernel): out[r] = in[slot_r / TOPK]
// for the routing's padded rows r (gather_index[r] = slot_r; padding rows untouched), so that a
// persistent wgmma GEMM1 reads whole A tiles by bulk tensor copies (GemmTile::pregather).
struct MoeGatherArgs {
  const unsigned char* in;   // [num_tokens, ld_in] activation rows (DTYPE, or e4m3 for w8a8)
  long long ld_in;           // bytes
  unsigned char* out;        // [padded rows, row_bytes]
  long long row_bytes;       // a multiple of 16
  const int* gather_index;   // [padded rows] routed slot, -1 on padding rows
  const int* totals;         // routing totals: [1] = padded rows
};

struct MoeReduceArgs {
  const void* in;            // reduce: [num_tokens * TOPK, ld_in] fp32 rows (reduce16: DTYPE);
                             // cast: [num_tokens, ld_in] fp32
  long long ld_in;
  const int* scatter_index;  // [num_tokens * TOPK]; slots with -1 (dropped) contribute zero
  void* out;                 // [num_tokens, ld_out] DTYPE
  long long ld_out;
  int num_tokens;
  int cols;                  // K, a multiple of 8
};

}  // namespace moejit

namespace moejit {

// fp8 activation quantization (moe_act_quant): DTYPE rows -> e4m3 rows + fp32 scales, before an
// e4m3 GEMM (X before GEMM1, the intermediate before GEMM2).
struct MoeActQuantArgs {
  const void* in;             // [rows, ld_in] DTYPE
  long long ld_in;            // elements
  unsigned char* out;         // [rows, ld_out] e4m3
  long long ld_out;           // bytes
  float* scale;               // [rows, ld_scale] fp32: per 128 columns (group mode) or per row
  long long ld_scale;
  const float* static_scale;  // kActQuantStatic: the tensor's scale (device); else unused
  int cols;                   // a multiple of 16 (fp8 layers' K and N); rows 16-byte aligned
  int num_rows;               // host bound on rows (grid size)
  const int* totals;          // non-null: rows = totals[1] (padded rows of the routing)
  const int* gather_index;    // non-null: rows with -1 (padding) are skipped
};

}  // namespace moejit
