// MoeLayer's private parts shared by its source files (moe_layer.cpp, moe_decode_forward.cpp):
// the kernels of one tile config and the carving of the caller's workspace.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "runtime/moe_layer.h"
#include "runtime/device.h"
#include "runtime/module.h"

namespace moejit {

struct MoeLayer::Kernels {
  MoeTileConfig config;
  bool gemm2_rows16 = false;  // GEMM2 stores DTYPE rows by slot; reduce16 sums them
  std::vector<std::shared_ptr<const Module>> modules;  // keep the functions alive
  const Kernel* gemm1 = nullptr;
  const Kernel* gemm2 = nullptr;
  const Kernel* gemm2_tiles = nullptr;  // the swap-AB GEMM2 waiting per row tile, where compiled
  const Kernel* reduce = nullptr;
  const Kernel* reduce16 = nullptr;
  const Kernel* cast = nullptr;
  const Kernel* gather = nullptr;  // X rows into padded-row order (GemmTile::pregather)
  const Kernel* activation = nullptr;  // unfused only
  const Kernel* act_quant = nullptr;   // w8a8 only: activations -> e4m3 before each GEMM
  const Kernel* gemv1 = nullptr;       // the decode GEMV pair (config.gemv): nothing above is set then
  const Kernel* gemv2 = nullptr;
  const Kernel* gemv2_many = nullptr;  // gemv2 for kMoeDecodeManyTokens tokens and more
  // fp8_block layers that may need them (moe_decode_gemv_span_wanted): the three above with each
  // CTA's shared memory holding its own tokens' rows only (SPAN); else null.
  const Kernel* gemv1_span = nullptr;
  const Kernel* gemv2_span = nullptr;
  const Kernel* gemv2_many_span = nullptr;
  void bind_decode_gemv(const Module& gemv);  // the six above from the decode GEMV's module
  unsigned gemm1_threads = 0, gemm1_smem = 0, gemm2_threads = 0, gemm2_smem = 0, elementwise_threads = 0;
  // Output columns per CTA and k per tile (block) of each GEMM, as its kernel spec says.
  int gemm1_block_n = 0, gemm1_block_k = 0, gemm2_block_n = 0, gemm2_block_k = 0;
  // Persistent wgmma kernels: a grid of at most one wave, each CTA walking the tiles; b_tma: they
  // read weights through a tensor map the forward encodes (MoeGemmArgs::b_tensor_map).
  bool gemm1_persistent = false, gemm2_persistent = false, gemm1_b_tma = false, gemm2_b_tma = false,
       gemm2_a_tma = false;
  // GEMM1 multicasting its weight tiles over clusters of two CTAs: the clusters the device holds at
  // once (its persistent grid is twice that at most); 0 = no clusters.
  int gemm1_clusters = 0;
};

struct MoeLayer::Workspace {
  RoutingResult routing;
  std::size_t max_rows = 0;
  CUdeviceptr gemm1_out = 0;     // unfused only
  CUdeviceptr intermediate = 0;
  // fp32 [M, K] accumulator or DTYPE [M * top_k, K] rows (fast), fp32 [M * top_k, K] rows (else)
  CUdeviceptr slots = 0;
  // Fast mode: GEMM1 split-K arrival counters (right before slots: one memset zeroes both) and
  // partial sums, when M is small enough to reserve them (gemm1_split).
  CUdeviceptr split_counters = 0, split_partial = 0;
  // Fast mode: per-tile readiness counters of the swap-AB decode pair ([tile bound] int: GEMM1's
  // CTAs done; common/tile_flags.cuh), zeroed with the rest.
  CUdeviceptr tile_ready = 0;
  CUdeviceptr zeroed = 0;        // fast mode: the counters, then the accumulator, zeroed before GEMM1
  std::size_t zeroed_bytes = 0;
  bool gemm1_split = false;
  bool pregather = false;        // slots can hold X gathered into padded-row order (GemmTile::pregather)
  // w8a8: e4m3 copies of X and of the intermediate, and their scales.
  CUdeviceptr hidden_q = 0, hidden_scale = 0, intermediate_q = 0, intermediate_scale = 0;
  std::size_t total = 0;
};

// Grid bound on row tiles of `block_m` rows for `rows` routed rows: every non-empty expert pads at
// most block_m - 1 rows, and at most min(local_experts, rows) experts are non-empty. (With the
// local experts alone, a decode step launched ~120 CTAs per column tile that only read the tile
// count and exit: at 1-2 resident CTAs per SM those exits cost more than the work.)
inline long long moe_max_row_tiles(long long rows, long long local_experts, int block_m) {
  return (rows + std::min(local_experts, rows) * (block_m - 1) + block_m - 1) / block_m;
}

// GEMM1's split-K partial sums ([kMoeMaxSplitK][M * top_k][W1 rows] fp32) are reserved only while
// they stay under this: split-K is for decode, where few CTAs would otherwise stream the weights.
inline constexpr std::size_t kSplitKPartialCapBytes = std::size_t(16) << 20;

// fp32 activation scales per row of a w8a8 GEMM's A with `cols` columns (0 = one static scale).
std::int64_t act_scales_per_row(MoeQuant q, std::int64_t cols);
// Whether the mma.sync swap-AB decode pair hands GEMM1's rows to GEMM2 per row tile
// (MoeGemmArgs::tile_ready): GEMM2's CTAs then start on finished tiles under GEMM1's last wave
// instead of waiting for the whole grid. `option` is Options::tile_handover (1 / 0: always / never
// where the pair runs under dependent launch), but for w8a8. By default where GEMM1's grid (`gemm1_ctas`) is more
// than one `wave` of resident CTAs and at most kTileHandoverMaxWaves: the gain is about one
// GEMM1 CTA's time (its tail), and the cost, a release per GEMM1 CTA and an acquire per GEMM2 CTA,
// grows with the CTAs. Not for w8a8 (fp8), whose intermediate is quantized between the two: per
// tile there too, it lost 1-9% (thirty-seventh session, docs/performance.md).
inline constexpr long long kTileHandoverMaxWaves = 16;
bool swap_ab_tile_handover(int option, MoeQuant quant, long long gemm1_ctas, long long wave);
// CTAs of `kernel` one SM holds at once (threads, registers, shared memory): split-K and the
// decode GEMV fill one wave, the persistent grid is this many CTAs an SM.
int resident_ctas_per_sm(const Kernel& kernel, unsigned threads, unsigned dynamic_smem, const DeviceInfo& device);
// The same from a compile's resource report (no driver needed; shared_per_sm 0: not bounded by it).
int resident_ctas_per_sm(int registers, int static_shared_bytes, unsigned threads, unsigned dynamic_smem,
                         int shared_per_sm);
// One decode GEMV kernel's launch (moe_decode_forward.cpp): its grid (one wave, or at least
// kMoeDecodeMinGrid CTAs with SPAN), dynamic shared memory (fp8_block: `tokens` token rows), whether
// it is the SPAN entry (each CTA's own tokens' rows) and CTAs an SM; ctas = 0: nothing fits.
struct DecodeGemvLaunch {
  bool span = false;
  unsigned grid = 0, smem = 0;
  int tokens = 0, ctas = 0;
};
// m tokens of `items` items (per_token a token), whose rows take smem_per_token bytes of dynamic
// shared memory a token (0: 16-bit weights); whole / span: the resources (registers, static shared
// memory) of the entries without and with SPAN (span null: the module has none); shared_per_sm: the
// device's (0: not bounded by it). SPAN where it fits more CTAs an SM than every token's rows (or
// where those do not fit at all). Plain numbers, no callbacks: it runs on every decode forward.
DecodeGemvLaunch plan_decode_gemv_launch(int m, long long items, long long per_token, long long smem_per_token,
                                         long long sm_count, int shared_per_sm, const KernelResources& whole,
                                         const KernelResources* span);

}  // namespace moejit
