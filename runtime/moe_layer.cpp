#include "runtime/moe_layer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "autotune/tuner.h"
#include "common/log.h"
#include "jit/families.h"
#include "jit/moe_names.h"
#include "runtime/moe_layer_parts.h"
#include "runtime/runtime.h"
#include "runtime/tile_tensor_map.h"
#include "templates/moe/moe_decode_args.cuh"
#include "templates/moe/moe_epilogue_args.cuh"
#include "templates/moe/moe_gemm_args.cuh"

namespace moejit {

std::int64_t act_scales_per_row(MoeQuant q, std::int64_t cols) {
  return q == kQuantFp8Block ? (cols + kQuantFp8BlockSize - 1) / kQuantFp8BlockSize : q == kQuantFp8Channel ? 1 : 0;
}

namespace {
constexpr unsigned kMaxGridY = 65535;
constexpr long long kMaxElementwiseBlocks = 1 << 16;  // grid-stride beyond this

// Splits of a GEMM's k loop of `k_tiles` tiles over a grid of `ctas` CTAs: `requested` when set
// (GemmTile::split_k), else as many as keep the grid within one wave (`resident` CTAs at once),
// each split keeping at least `stages` k tiles (a full ring). Never an empty split. (A blanket
// "two CTAs per SM" made gpt-oss's GEMM1 at M = 1, one 128 KiB CTA per SM, run three waves.)
int split_k_for(int requested, long long ctas, int k_tiles, int stages, long long resident) {
  int splits = requested;
  if (splits == 0) {
    splits = static_cast<int>(std::clamp<long long>(resident / std::max(1LL, ctas), 1, kMoeMaxSplitK));
    splits = std::min(splits, std::max(1, k_tiles / stages));
  }
  splits = std::clamp(splits, 1, std::max(1, k_tiles));
  const int per = (k_tiles + splits - 1) / splits;
  return (k_tiles + per - 1) / per;
}

unsigned elementwise_blocks(long long work_items, int threads) {
  return static_cast<unsigned>(std::clamp<long long>((work_items + threads - 1) / threads, 1, kMaxElementwiseBlocks));
}
}  // namespace

bool swap_ab_tile_handover(int option, MoeQuant quant, long long gemm1_ctas, long long wave) {
  if (quant_is_fp8(quant)) return false;
  if (option >= 0) return option == 1;
  return gemm1_ctas > wave && gemm1_ctas <= kTileHandoverMaxWaves * wave;
}

int resident_ctas_per_sm(int registers, int static_shared_bytes, unsigned threads, unsigned dynamic_smem,
                         int shared_per_sm) {
  constexpr int kThreadsPerSm = 2048, kRegistersPerSm = 65536, kReservedSmemPerCta = 1024;
  const int regs = std::max(8, (registers + 7) / 8 * 8);  // allocation granularity
  const int by_threads = kThreadsPerSm / static_cast<int>(threads);
  const int by_regs = kRegistersPerSm / (regs * static_cast<int>(threads));
  const int smem = static_cast<int>(dynamic_smem) + static_shared_bytes + kReservedSmemPerCta;
  const int by_smem = shared_per_sm > 0 ? shared_per_sm / smem : by_threads;
  return std::max(1, std::min({by_threads, by_regs, by_smem}));
}

int resident_ctas_per_sm(const Kernel& kernel, unsigned threads, unsigned dynamic_smem, const DeviceInfo& device) {
  return resident_ctas_per_sm(kernel.resources().registers, kernel.resources().static_shared_bytes, threads,
                              dynamic_smem, device.shared_per_sm);
}

MoeLayer::MoeLayer(Runtime& runtime, MoeSpec spec)
    : runtime_(runtime), spec_(spec), router_(runtime, moe_layer_router_config(spec)) {
  // Completes (validates) one config's specs now, for the oldest arch the layer can run on.
  moe_expert_kernel_specs(spec_, heuristic_tile_config(spec_, 1), quant_is_fp8(spec_.quant) ? "sm_89" : "sm_80");
}

MoeLayer::~MoeLayer() = default;

void MoeLayer::prepare(int max_tokens) {
  MOEJIT_REQUIRE(max_tokens >= 1, "moe: prepare(max_tokens = {}) needs max_tokens >= 1", max_tokens);
  load_tuned();
  if (!tuned() && runtime_.options().tune_on_first_use) tune_now(max_tokens);
  const std::string arch = runtime_.device_arch();
  std::vector<MoeTileConfig> configs;
  if (!tuned()) {
    configs = heuristic_tile_configs(spec_, max_tokens, arch);
  } else {
    // The config of each batch size up to max_tokens: a tuned bucket in reach, else the heuristic's
    // (tuned_db.h, kTunedBucketReachLog2), at the batch sizes the heuristic's own list samples.
    for (int m : config_batch_sizes(max_tokens)) {
      const MoeTileConfig c = tile_config(m);
      if (std::find(configs.begin(), configs.end(), c) == configs.end()) configs.push_back(c);
    }
  }
  // Each config in every GEMM2 role a batch up to max_tokens runs it in.
  std::vector<KernelSpec> specs = moe_layer_kernel_specs(spec_, 1, arch);
  for (const auto& c : configs)
    for (bool rows16 : moe_gemm2_roles_upto(spec_, c, max_tokens))
      for (auto& s : moe_expert_kernel_specs(spec_, c, arch, rows16)) specs.push_back(std::move(s));
  runtime_.compile_all(specs);
  router_.prepare();
  for (const auto& config : configs)
    for (bool rows16 : moe_gemm2_roles_upto(spec_, config, max_tokens)) kernels_for(config, rows16);
}

const MoeLayer::Kernels& MoeLayer::kernels_for(const MoeTileConfig& config, bool gemm2_rows16) {
  std::lock_guard<std::mutex> lock(mutex_);
  // A handful of configs per layer: a linear search, and no string built on every forward.
  for (const auto& k : kernels_)
    if (k->config == config && k->gemm2_rows16 == gemm2_rows16) return *k;
  const auto specs = moe_expert_kernel_specs(spec_, config, runtime_.device_arch(), gemm2_rows16);
  require_fits_device(specs, config.block_m);  // a clear error before any launch, not a failed one
  runtime_.compile_all(specs);
  auto k = std::make_unique<Kernels>();
  k->config = config;
  k->gemm2_rows16 = gemm2_rows16;
  for (const auto& s : specs) k->modules.push_back(runtime_.load(s));
  if (config.gemv) {
    k->bind_decode_gemv(*k->modules[0]);
    if (spec_.quant == kQuantFp8Block) {  // X quantized once where the GEMV's CTAs would not overlap it (forward_decode)
      k->act_quant = &k->modules[1]->kernel("quantize");
      k->elementwise_threads = unsigned(specs[1].get_int("threads"));
    }
    kernels_.push_back(std::move(k));
    return *kernels_.back();
  }
  k->gemm1 = &k->modules[0]->kernel("gemm");
  k->gemm2 = &k->modules[1]->kernel("gemm");
  k->gemm2_tiles = k->modules[1]->find_kernel("gemm_tiles");
  k->reduce = &k->modules[2]->kernel("reduce");
  k->reduce16 = &k->modules[2]->kernel("reduce16");
  k->cast = &k->modules[2]->kernel("cast");
  k->gather = &k->modules[2]->kernel("gather");
  if (!spec_.fused) k->activation = &k->modules[3]->kernel("activation");
  if (quant_is_fp8(spec_.quant)) k->act_quant = &k->modules.back()->kernel("quantize");
  k->gemm1_threads = unsigned(specs[0].get_int("threads"));
  k->gemm1_smem = unsigned(specs[0].get_int("smem_bytes"));
  k->gemm2_threads = unsigned(specs[1].get_int("threads"));
  k->gemm2_smem = unsigned(specs[1].get_int("smem_bytes"));
  k->elementwise_threads = unsigned(specs[2].get_int("threads"));
  k->gemm1_block_n = int(specs[0].get_int("block_n"));
  k->gemm1_block_k = int(specs[0].get_int("block_k"));
  k->gemm2_block_n = int(specs[1].get_int("block_n"));
  k->gemm2_block_k = int(specs[1].get_int("block_k"));
  // A wgmma kernel's flag (persistent, b_tma, a_tma); the other families have none.
  auto wgmma_flag = [](const KernelSpec& s, const char* name) {
    return s.family == "moe_gemm_wgmma" && s.get_int(name) != 0;
  };
  k->gemm1_persistent = wgmma_flag(specs[0], "persistent");
  k->gemm2_persistent = wgmma_flag(specs[1], "persistent");
  k->gemm1_b_tma = wgmma_flag(specs[0], "b_tma");
  k->gemm2_b_tma = wgmma_flag(specs[1], "b_tma");
  k->gemm2_a_tma = wgmma_flag(specs[1], "a_tma");
  if (wgmma_flag(specs[0], "multicast")) {
    k->gemm1_clusters = k->gemm1->max_active_clusters({2, 1, 1, k->gemm1_threads, 1, 1, k->gemm1_smem, false, 2});
    MOEJIT_REQUIRE(k->gemm1_clusters > 0, "moe: tile config {}: the device holds no cluster of two {}-thread CTAs with "
                   "{} bytes of shared memory each", config.describe(), k->gemm1_threads, k->gemm1_smem);
  }
  log(LogLevel::Debug, "moe: loaded kernels for {} ({})", spec_.describe(), config.describe());
  kernels_.push_back(std::move(k));
  return *kernels_.back();
}

// w8a8: rows of DTYPE -> e4m3 + scales (per 128 columns, per row, or the static scale).
void MoeLayer::quantize_activations(CUstream stream, const Kernels& k, const ActQuantRows& r, bool overlap_previous) const {
  MoeActQuantArgs q{};
  q.in = reinterpret_cast<const void*>(r.in);
  q.ld_in = r.ld_in;
  q.out = reinterpret_cast<unsigned char*>(r.out);
  q.ld_out = r.cols;
  q.scale = reinterpret_cast<float*>(r.scale);
  q.ld_scale = act_scales_per_row(spec_.quant, r.cols);
  q.static_scale = r.static_scale.given() ? reinterpret_cast<const float*>(r.static_scale.data) : nullptr;
  q.cols = r.cols;
  q.num_rows = static_cast<int>(r.rows);
  q.totals = r.totals;
  q.gather_index = r.gather;
  const unsigned t = k.elementwise_threads;
  // Group scales: kActQuantGroupsPerWarp (row, group) units a warp (the kernel indexes them, and
  // steps past them by a grid's worth, in 32 bits: check() keeps them under 2^30); else a warp per row.
  const bool groups = spec_.quant == kQuantFp8Block;
  const long long warps = groups ? (r.rows * q.ld_scale + kActQuantGroupsPerWarp - 1) / kActQuantGroupsPerWarp : r.rows;
  k.act_quant->launch(stream, {elementwise_blocks(warps * 32, t), 1, 1, t, 1, 1, 0, overlap_previous}, q);
}

void MoeLayer::forward(CUstream stream, const MoeForwardArgs& args, const MoeStageHooks* hooks) {
  load_tuned();
  forward_with_config(stream, args, tile_config(static_cast<int>(args.hidden.shape[0])), hooks);
}

void MoeLayer::forward_with_config(CUstream stream, const MoeForwardArgs& args, const MoeTileConfig& config,
                                   const MoeStageHooks* hooks) {
  check(args);
  MOEJIT_REQUIRE(hooks == nullptr || !spec_.fused,
                 "moe: stage hooks need the unfused mode (MoeSpec::fused = false); the fused layer has no stages");
  MOEJIT_REQUIRE(config.block_m >= kMoeMinBlockM && config.block_m <= kMoeMaxBlockM,
                 "moe: tile config {} has block_m outside [{}, {}]", config.describe(), kMoeMinBlockM, kMoeMaxBlockM);
  for (const GemmTile* t : {&config.gemm1, &config.gemm2})
    MOEJIT_REQUIRE(t->split_k >= 0 && t->split_k <= kMoeMaxSplitK, "moe: tile config {} asks for split_k = {}; 0..{} allowed",
                   config.describe(), t->split_k, kMoeMaxSplitK);
  MOEJIT_REQUIRE((config.gemm1.split_k <= 1 && config.gemm2.split_k <= 1) || (spec_.fused && spec_.reduce == ReduceMode::Fast),
                 "moe: split-K (tile config {}) needs the fused layer in the fast reduce mode: the deterministic "
                 "mode's sums must not depend on the batch", config.describe());
  const int m = static_cast<int>(args.hidden.shape[0]);
  if (m == 0) return;  // nothing to route or compute; out has no rows
  if (config.gemv) {
    forward_decode(stream, args, m, kernels_for(config, false));
    return;
  }
  // Large batches: GEMM2 stores DTYPE rows by slot and reduce16 sums them (no fp32 adds, no zeroing).
  const bool rows16 = moe_gemm2_stores_rows16(spec_, config, m);
  const Kernels& k = kernels_for(config, rows16);
  const Workspace w = carve(args, m);
  MOEJIT_REQUIRE(config.gemm1.split_k <= 1 || w.gemm1_split,
                 "moe: tile config {} splits GEMM1's k loop, but M = {} is too large for its partial-sum workspace "
                 "(split-K is reserved for M * top_k * W1 rows * {} * 4 <= {} bytes)",
                 config.describe(), m, kMoeMaxSplitK, kSplitKPartialCapBytes);
  const int bm = config.block_m;
  const long long rows = static_cast<long long>(m) * spec_.top_k;
  const long long max_tiles = moe_max_row_tiles(rows, spec_.local_experts(), bm);
  MOEJIT_REQUIRE(max_tiles <= kMaxGridY, "moe: {} row tiles of {} exceed the grid limit {}; use fewer tokens per call",
                 max_tiles, bm, kMaxGridY);

  const bool atomic = spec_.fused && spec_.reduce == ReduceMode::Fast;
  auto& api = runtime_.driver();
  // Tensor maps of the weights for kernels that read them by bulk tensor copies, encoded before
  // anything launches (the driver's refusal is then an error with nothing half done).
  TileTensorMap map1, map2, map2_a;
  if (k.gemm1_b_tma)  // interleaved gate / up rows: each box takes every second row
    map1 = encode_tile_tensor_map(api, args.w1, spec_.hidden * static_cast<long long>(scalar_type_size(args.w1.dtype)),
                                  k.gemm1_block_n,
                                  spec_.fused && activation_is_interleaved(spec_.activation) ? 2 : 1);
  if (k.gemm2_b_tma)
    map2 = encode_tile_tensor_map(api, args.w2,
                                  spec_.intermediate * static_cast<long long>(scalar_type_size(args.w2.dtype)),
                                  k.gemm2_block_n);
  if (k.gemm2_a_tma) {  // GEMM2's A: the intermediate (e4m3 for w8a8), as allocated
    const bool q8 = quant_is_fp8(spec_.quant);
    const std::int64_t rows = static_cast<std::int64_t>(w.max_rows);
    TensorView inter;
    inter.data = q8 ? w.intermediate_q : w.intermediate;
    inter.dtype = q8 ? ScalarType::F8E4M3 : scalar_type_of(spec_.dtype);
    inter.rank = 3;
    inter.shape = {1, rows, spec_.intermediate};
    inter.strides = {rows * spec_.intermediate, spec_.intermediate, 1};
    map2_a = encode_tile_tensor_map(api, inter,
                                    spec_.intermediate * static_cast<long long>(scalar_type_size(inter.dtype)), int(bm));
  }
  // GEMM1 reading X gathered beforehand (GemmTile::pregather; where the workspace holds the copy):
  // X's rows (e4m3 for w8a8) in padded-row order, in the slots buffer, one box of bm rows per tile.
  const bool pregather = config.gemm1.pregather && k.gemm1_persistent && w.pregather;
  const bool q8 = quant_is_fp8(spec_.quant);
  const ScalarType act_type = q8 ? ScalarType::F8E4M3 : scalar_type_of(spec_.dtype);
  const long long x_row_bytes = spec_.hidden * static_cast<long long>(scalar_type_size(act_type));
  TileTensorMap map1_a;
  if (pregather) {
    const std::int64_t rows = static_cast<std::int64_t>(w.max_rows);
    TensorView xs;
    xs.data = w.slots;
    xs.dtype = act_type;
    xs.rank = 3;
    xs.shape = {1, rows, spec_.hidden};
    xs.strides = {rows * spec_.hidden, spec_.hidden, 1};
    map1_a = encode_tile_tensor_map(api, xs, x_row_bytes, int(bm));
  }
  // Fast mode zeroes the fp32 accumulator (and GEMM1's split-K counters) first: the kernels after
  // the routing then follow each other directly. Small batches routed here have the route kernel
  // zero them instead: the memset node cost DeepSeek-V3 TP8 ~4 us of a 41 us step at M = 1 (H200).
  // (DTYPE rows need no zeroing; GEMM1's split-K counters still do.)
  // (With X gathered into the slots buffer, after GEMM1 has read it.)
  const bool zeroed = atomic && (!rows16 || w.gemm1_split);
  const bool zero_late = zeroed && pregather;
  const bool route_zeroes = zeroed && !zero_late && args.router_logits.given() && router_.zeroes_for(m, w.zeroed_bytes);
  if (zeroed && !route_zeroes && !zero_late)
    MOEJIT_CHECK_CU(api, Launch, cuMemsetD32Async(w.zeroed, 0, w.zeroed_bytes / 4, stream));
  // Grids: row tiles x column tiles x k splits. Split-K (fast mode): decode grids would leave most
  // SMs idle while a few CTAs stream the weights.
  const DeviceInfo& device = runtime_.device().info();
  auto grid_x = [](int cols, int block_n) { return unsigned((cols + block_n - 1) / block_n); };
  auto wave = [&](const Kernel& kernel, unsigned threads, unsigned smem) {  // CTAs resident at once
    return static_cast<long long>(device.sm_count) * resident_ctas_per_sm(kernel, threads, smem, device);
  };
  // (A multicast GEMM1's wave: the clusters of two the device holds at once.)
  const long long wave1 = k.gemm1_clusters > 0 ? 2LL * k.gemm1_clusters : wave(*k.gemm1, k.gemm1_threads, k.gemm1_smem);
  const long long wave2 = wave(*k.gemm2, k.gemm2_threads, k.gemm2_smem);
  // k tiles of each GEMM (blocks of the swap-AB kernel), and how many of them each split takes.
  const int k_tiles1 = (spec_.hidden + k.gemm1_block_k - 1) / k.gemm1_block_k;
  const int k_tiles2 = (spec_.intermediate + k.gemm2_block_k - 1) / k.gemm2_block_k;
  auto split = [&](const GemmTile& t, unsigned gx, int k_tiles, long long resident, bool allowed) {
    if (!allowed) return 1;
    // A split of the swap-AB kernel fills every warp along k's register ring.
    const int min_tiles = t.swap_ab ? t.stages * t.warps_k : t.stages;
    return split_k_for(t.split_k, static_cast<long long>(gx) * max_tiles, k_tiles, min_tiles, resident);
  };
  auto tiles_per_split = [](int k_tiles, int splits) { return splits > 1 ? (k_tiles + splits - 1) / splits : 0; };
  const unsigned gx1 = grid_x(spec_.fused ? spec_.intermediate : spec_.w1_rows(), k.gemm1_block_n);
  const unsigned gx2 = grid_x(spec_.hidden, k.gemm2_block_n);
  // GEMM1 splits park partial sums (the shared-memory kernel only); GEMM2's add atomically (not
  // where it stores DTYPE rows).
  const int splits1 =
      split(config.gemm1, gx1, k_tiles1, wave1, w.gemm1_split && !config.gemm1.swap_ab && !config.gemm1.wgmma);
  const int splits2 = split(config.gemm2, gx2, k_tiles2, wave2, atomic && !rows16);
  // The fused layer's kernels after the routing start under the previous kernel's tail on sm_90+
  // (programmatic dependent launch; each waits on the device before touching its inputs) when both
  // GEMMs run in one wave, or both on the mma.sync swap-AB decode kernel. DeepSeek-V3 TP8 at M = 1
  // took 42.8 -> 40.8 us on an H200, but Mixtral at M = 16 / 128 (GEMM1 of ~2000 wgmma CTAs) 727 ->
  // 810 / 1046 -> 1152, and on an H100 the persistent prefill GEMMs (a wave of CTAs, some of which
  // would start late beside the previous kernel's) Mixtral M = 1024 1599-1608 -> 2211-2214 us,
  // DeepSeek-V3 TP8 M = 8192 2135-2139 -> 2862-2866. Swap-AB GEMMs of several waves (decode: a CTA
  // per 32-128 output columns and routed expert) gain (thirty-second session, H100, same run, two
  // rounds): fp8_block DeepSeek-V3 TP8 M = 3 / 4 / 16 / 32 69.9-70.0 / 83.5-83.6 / 219.0-219.8 /
  // 344.8-345.4 -> 66.1 / 80.9-81.0 / 215.7-215.9 / 341.1-341.4 us, MXFP4 gpt-oss-120b (prepacked)
  // 81.5 / 100.0-100.5 / 270.4-270.9 / 428.1 -> 77.6 / 95.9-96.0 / 266.0-266.7 / 424.7-425.1, int4
  // Qwen3-30B-A3B M = 4 / 16 56.0-56.1 / 113.1 -> 51.0-51.3 / 108.1-108.9; within 0.5% from M = 48
  // up. Not the wgmma variant (MXFP4 M = 512: 1134-1138 -> 1151 us). Not in the unfused mode: its
  // hooks put the caller's work between the stages.
  const bool one_wave = static_cast<long long>(gx1) * max_tiles * splits1 <= wave1 &&
                        static_cast<long long>(gx2) * max_tiles * splits2 <= wave2;
  auto mma_sync_swap_ab = [](const GemmTile& t) { return t.swap_ab && !t.swap_ab_wgmma; };
  const bool dependent_launch = spec_.fused && arch_has_dependent_launch(runtime_.device_arch());
  const bool swap_ab_pair = mma_sync_swap_ab(config.gemm1) && mma_sync_swap_ab(config.gemm2);
  const bool overlap = dependent_launch && (one_wave || swap_ab_pair);
  // The swap-AB pair under dependent launch may hand GEMM1's rows to GEMM2 per row tile
  // (common/tile_flags.cuh; swap_ab_tile_handover says where). Its counters are carved for every
  // fast-mode forward (one per row tile of the smallest block_m) and zeroed with the accumulator
  // before GEMM1 (never late: that is the persistent GEMM1's pregather).
  const bool per_tile = overlap && swap_ab_pair && atomic && !rows16 && k.gemm2_tiles &&
                        swap_ab_tile_handover(runtime_.options().tile_handover, spec_.quant,
                                              static_cast<long long>(gx1) * max_tiles, wave1);
  int* const gemm1_done = per_tile ? reinterpret_cast<int*>(w.tile_ready) : nullptr;

  const bool fp8 = quant_is_fp8(spec_.quant);
  // w8a8: X first, then the routing beside it (Router::route's beside_previous, sm_90+): the two
  // read and write nothing of each other's, and the routing's kernels end only after X's. X's launch
  // then follows everything before it (no overlap): the routing starts as soon as X's kernel does,
  // and must find the previous forward done (its route zeroes the fp32 accumulator that forward's
  // cast reads). H100, same run, two rounds (thirty-third session): fp8_block DeepSeek-V3 TP8 M = 3
  // / 4 / 16 / 128 65.9-66.1 / 81.0-81.1 / 217.8 / 549.1 -> 64.4-64.5 / 79.4-79.5 / 215.8-215.9 /
  // 547.7-547.8 us, fp8_channel Qwen3-30B-A3B M = 1 / 4 31.0-31.2 / 69.9-70.4 -> 28.5 / 66.2-66.4.
  const bool x_beside = fp8 && dependent_launch && args.router_logits.given();
  if (fp8)
    quantize_activations(stream, k,
                         {args.hidden.data, args.hidden.strides[0], w.hidden_q, w.hidden_scale, spec_.hidden, m,
                          nullptr, nullptr, args.a1_scale},
                         overlap && !x_beside);

  // Routing: metadata for this call's block_m.
  const CUdeviceptr expert_map = args.expert_map.given() ? args.expert_map.data : 0;
  const float* topk_weights = nullptr;
  if (args.router_logits.given()) {
    router_.route(stream, args.router_logits.data, args.router_logits.strides[0],
                  args.correction_bias.given() ? args.correction_bias.data : 0, expert_map, m, m, w.routing, bm,
                  route_zeroes ? w.zeroed : 0, route_zeroes ? w.zeroed_bytes : 0, x_beside);
    topk_weights = w.routing.topk_weights;
  } else {
    router_.sorter().run(stream, args.topk_ids.data, expert_map, m, m, w.routing.sort, bm);
    topk_weights = reinterpret_cast<const float*>(args.topk_weights.data);
  }
  const RoutingSortBuffers& sort = w.routing.sort;
  MoeStageBuffers stage{m, w.max_rows, w.gemm1_out, w.intermediate, w.slots, sort.gather_index, sort.scatter_index,
                        sort.totals};
  // Weights as stored (bytes), their scales and zero points.
  auto set_weights = [&](MoeGemmArgs& g, const TensorView& w, const TensorView& scale, const TensorView& zero) {
    const std::size_t es = scalar_type_size(w.dtype);
    g.b = reinterpret_cast<const void*>(w.data);
    g.b_expert_stride = w.strides[0] * static_cast<long long>(es);
    g.ldb = w.strides[1] * static_cast<long long>(es);
    g.b_scale = scale.given() ? reinterpret_cast<const void*>(scale.data) : nullptr;
    g.b_scale_expert_stride = scale.given() ? scale.strides[0] : 0;
    g.b_scale_row_stride = scale.rank >= 2 ? scale.strides[1] : 0;
    g.b_scale_row_shift = spec_.quant == kQuantFp8Block ? 7 : 0;
    g.b_scale_k_shift = spec_.quant == kQuantInt4Group
                            ? (spec_.quant_group == kQuantGroupPerRow ? kQuantGroupPerRowShift
                                                                      : std::countr_zero(unsigned(spec_.quant_group)))
                        : quant_is_mxfp4(spec_.quant) ? std::countr_zero(unsigned(kMxfp4GroupSize))
                        : spec_.quant == kQuantFp8Block ? 7
                                                          : 0;
    g.b_zero = zero.given() ? reinterpret_cast<const unsigned char*>(zero.data) : nullptr;
  };
  static_assert(kQuantFp8BlockSize == 1 << 7, "b_scale_row_shift / b_scale_k_shift above");

  // GEMM1: fused -> activation in the epilogue; unfused -> raw [rows, W1 rows], then the activation.
  MoeGemmArgs g{};
  // X (quantized for w8a8) gathered into padded-row order for GEMM1's bulk tensor copies.
  auto gather_x = [&](CUdeviceptr x, long long ld_bytes) {
    MoeGatherArgs ga{};
    ga.in = reinterpret_cast<const unsigned char*>(x);
    ga.ld_in = ld_bytes;
    ga.out = reinterpret_cast<unsigned char*>(w.slots);
    ga.row_bytes = x_row_bytes;
    ga.gather_index = sort.gather_index;
    ga.totals = sort.totals;
    const unsigned t = k.elementwise_threads;
    const auto blocks = static_cast<unsigned>(std::min<long long>(max_tiles * bm, 8LL * runtime_.device().info().sm_count));
    k.gather->launch(stream, {blocks, 1, 1, t, 1, 1, 0, overlap}, ga);
    g.a_pregathered = 1;
    std::memcpy(g.a_tensor_map, map1_a.bytes, sizeof(map1_a.bytes));
  };
  if (fp8) {  // X quantized above
    g.a = reinterpret_cast<const void*>(w.hidden_q);
    g.lda = spec_.hidden;
    g.a_scale = reinterpret_cast<const float*>(spec_.quant == kQuantFp8Tensor ? args.a1_scale.data : w.hidden_scale);
    g.a_scale_ld = act_scales_per_row(spec_.quant, spec_.hidden);
    if (pregather) gather_x(w.hidden_q, spec_.hidden);
  } else {
    g.a = reinterpret_cast<const void*>(args.hidden.data);
    g.lda = args.hidden.strides[0] * 2;
    if (pregather) gather_x(args.hidden.data, g.lda);
  }
  set_weights(g, args.w1, args.w1_scale, args.w1_zero);
  if (k.gemm1_b_tma) std::memcpy(g.b_tensor_map, map1.bytes, sizeof(map1.bytes));
  g.bias = spec_.has_bias ? reinterpret_cast<const float*>(args.b1.data) : nullptr;
  g.bias_expert_stride = spec_.has_bias ? args.b1.strides[0] : 0;
  g.n_out = spec_.fused ? spec_.intermediate : spec_.w1_rows();
  g.c = reinterpret_cast<void*>(spec_.fused ? w.intermediate : w.gemm1_out);
  g.ldc = g.n_out;
  g.inner = spec_.hidden;
  g.up_row_offset = spec_.intermediate;
  g.top_k = spec_.top_k;
  g.gather_index = sort.gather_index;
  g.tile_expert = sort.tile_expert;
  g.totals = sort.totals;
  g.topk_weights = topk_weights;
  g.weight_on_input = spec_.router_weight_on_input ? 1 : 0;
  g.weight_on_output = spec_.router_weight_on_input ? 0 : 1;
  g.alpha = spec_.swiglu_alpha;
  g.limit = spec_.swiglu_limit;
  g.walk_rows = config.gemm1.walk_rows;
  // Persistent wgmma GEMMs may claim their items from a counter the routing zeroed, in walk order
  // (claims_work_items: MOEJIT_WORK_QUEUE, the tile's work_queue, else the rule).
  static_assert(kRoutingWorkCounters == 2, "a work queue counter per GEMM");
  auto work_counter = [&](const GemmTile& t, bool persistent, bool clusters, int splits, int which) -> int* {
    const bool claims =
        persistent && claims_work_items(spec_, bm, which == 1, t, clusters, splits, runtime_.options().work_queue);
    return claims ? sort.totals + 3 + which : nullptr;
  };
  g.work_counter = work_counter(config.gemm1, k.gemm1_persistent, k.gemm1_clusters > 0, splits1, 0);
  g.tile_ready = gemm1_done;  // GEMM1 counts its CTAs per row tile ...
  if (splits1 > 1) {
    g.k_tiles_per_split = tiles_per_split(k_tiles1, splits1);
    g.split_partial = reinterpret_cast<float*>(w.split_partial);
    g.split_counters = reinterpret_cast<int*>(w.split_counters);
    g.split_stride = static_cast<long long>(m) * spec_.top_k * spec_.w1_rows();
  }
  // Grid (x, y): column tiles x row tiles, or a persistent kernel's one wave (per k split).
  auto gemm_grid = [&](bool persistent, unsigned gx, long long wave, int splits) {
    if (!persistent) return std::pair<unsigned, unsigned>(gx, unsigned(max_tiles));
    const long long per_split = std::max<long long>(1, wave / splits);
    return std::pair<unsigned, unsigned>(unsigned(std::min<long long>(static_cast<long long>(gx) * max_tiles, per_split)), 1u);
  };
  auto [g1x, g1y] = gemm_grid(k.gemm1_persistent, gx1, wave1, splits1);
  const unsigned cluster1 = k.gemm1_clusters > 0 ? 2 : 1;
  g1x = (g1x + cluster1 - 1) / cluster1 * cluster1;  // whole clusters (wave1 is even)
  k.gemm1->launch(stream, {g1x, g1y, unsigned(splits1), k.gemm1_threads, 1, 1, k.gemm1_smem, overlap, cluster1},
                  g);
  g.a_pregathered = 0;
  if (zero_late) MOEJIT_CHECK_CU(api, Launch, cuMemsetD32Async(w.zeroed, 0, w.zeroed_bytes / 4, stream));
  if (!spec_.fused) {
    if (hooks && hooks->after_gemm1) hooks->after_gemm1(stream, stage);
    MoeActivationArgs a{};
    a.in = reinterpret_cast<const void*>(w.gemm1_out);
    a.ld_in = spec_.w1_rows();
    a.out = reinterpret_cast<void*>(w.intermediate);
    a.ld_out = spec_.intermediate;
    a.n_out = spec_.intermediate;
    a.gather_index = sort.gather_index;
    a.totals = sort.totals;
    a.max_rows = static_cast<int>(max_tiles * bm);
    a.alpha = spec_.swiglu_alpha;
    a.limit = spec_.swiglu_limit;
    const unsigned t = k.elementwise_threads;
    k.activation->launch(stream, {elementwise_blocks(max_tiles * bm * spec_.intermediate / 2, t), 1, 1, t, 1, 1, 0}, a);
    if (hooks && hooks->after_activation) hooks->after_activation(stream, stage);
  }

  // GEMM2 and the top-k reduction.
  if (fp8) {
    quantize_activations(stream, k,
                         {w.intermediate, spec_.intermediate, w.intermediate_q, w.intermediate_scale, spec_.intermediate,
                          max_tiles * bm, sort.totals, sort.gather_index, args.a2_scale},
                         overlap);
    g.a = reinterpret_cast<const void*>(w.intermediate_q);
    g.lda = spec_.intermediate;
    g.a_scale = reinterpret_cast<const float*>(spec_.quant == kQuantFp8Tensor ? args.a2_scale.data : w.intermediate_scale);
    g.a_scale_ld = act_scales_per_row(spec_.quant, spec_.intermediate);
  } else {
    g.a = reinterpret_cast<const void*>(w.intermediate);
    g.lda = std::int64_t(spec_.intermediate) * 2;
    g.tile_ready_target = int(g1x);  // ... and GEMM2 waits for all of its row tile's
  }
  set_weights(g, args.w2, args.w2_scale, args.w2_zero);
  if (k.gemm2_b_tma) std::memcpy(g.b_tensor_map, map2.bytes, sizeof(map2.bytes));
  if (k.gemm2_a_tma) std::memcpy(g.a_tensor_map, map2_a.bytes, sizeof(map2_a.bytes));
  g.bias = spec_.has_bias ? reinterpret_cast<const float*>(args.b2.data) : nullptr;
  g.bias_expert_stride = spec_.has_bias ? args.b2.strides[0] : 0;
  g.n_out = spec_.hidden;
  g.c = reinterpret_cast<void*>(w.slots);
  g.ldc = spec_.hidden;
  g.inner = spec_.intermediate;
  g.split_partial = nullptr;
  g.split_counters = nullptr;
  g.k_tiles_per_split = tiles_per_split(k_tiles2, splits2);
  g.walk_rows = config.gemm2.walk_rows;
  g.work_counter = work_counter(config.gemm2, k.gemm2_persistent, false, splits2, 1);
  const auto [g2x, g2y] = gemm_grid(k.gemm2_persistent, gx2, wave2, splits2);
  (per_tile ? k.gemm2_tiles : k.gemm2)
      ->launch(stream, {g2x, g2y, unsigned(splits2), k.gemm2_threads, 1, 1, k.gemm2_smem, overlap}, g);
  if (!spec_.fused && hooks && hooks->after_gemm2) hooks->after_gemm2(stream, stage);
  MoeReduceArgs r{};
  r.in = reinterpret_cast<const void*>(w.slots);
  r.ld_in = spec_.hidden;
  r.scatter_index = sort.scatter_index;
  r.out = reinterpret_cast<void*>(args.out.data);
  r.ld_out = args.out.strides[0];
  r.num_tokens = m;
  r.cols = spec_.hidden;
  const unsigned t = k.elementwise_threads;
  const unsigned blocks = elementwise_blocks(static_cast<long long>(m) * spec_.hidden / (rows16 ? 8 : 4), t);
  (rows16 ? k.reduce16 : atomic ? k.cast : k.reduce)->launch(stream, {blocks, 1, 1, t, 1, 1, 0, overlap}, r);
}

}  // namespace moejit
