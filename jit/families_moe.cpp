// The MoE expert families: moe_gemm (grouped GEMM over the routing tile map, both roles),
// moe_activation (unfused mode) and moe_reduce (top-k sum and fp32 -> dtype cast).
#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"
#include "jit/family_builders.h"
#include "jit/moe_names.h"
#include "templates/moe/activation_kinds.cuh"
#include "templates/moe/moe_decode_args.cuh"
#include "templates/moe/moe_gemm_args.cuh"
#include "templates/moe/quant_kinds.cuh"

namespace moejit {

namespace {

constexpr std::int64_t kMaxSharedBytes = kMoeWgmmaMaxSharedBytes;  // opt-in limit of sm_90 / sm_100 (sm_80: 163 KiB)
constexpr std::int64_t kMaxStaticSharedBytes = 48 * 1024;
constexpr std::int64_t kElementwiseThreads = 256;

ParamDesc dtype_param() {
  return enum_param("dtype", "DTYPE", "activation and weight element type", "bf16",
                    {{"bf16", "moejit::kDTypeBF16"}, {"f16", "moejit::kDTypeF16"}});
}

ParamDesc activation_param(const std::string& def) {
  std::map<std::string, std::string> values;
  static const char* kCpp[] = {"kActNone", "kActSiluMul", "kActGeluMul", "kActGeluTanhMul", "kActSwigluOai",
                               "kActSwigluStep", "kActSilu", "kActGelu", "kActGeluTanh", "kActRelu2"};
  for (int code = kActNone; code <= kActRelu2; ++code)
    values[activation_name(code)] = std::string("moejit::") + kCpp[code];
  return enum_param("activation", "ACT", "activation (GEMM1 epilogue / activation kernel)", def, values);
}

int activation_code(const KernelSpec& s) { return parse_activation(s.get_string("activation")); }

// The role parameter's values: name, code (host-side checks) and the template argument.
struct GemmRole {
  const char* name;
  int code;
  const char* template_arg;
};
constexpr GemmRole kGemmRoles[] = {{"gemm1", kRoleGemm1, "moejit::kRoleGemm1"},
                                   {"gemm2_rows", kRoleGemm2Rows, "moejit::kRoleGemm2Rows"},
                                   {"gemm2_atomic", kRoleGemm2Atomic, "moejit::kRoleGemm2Atomic"},
                                   {"gemm2_rows16", kRoleGemm2Rows16, "moejit::kRoleGemm2Rows16"}};

ParamDesc gemm_role_param() {
  std::map<std::string, std::string> values;
  for (const GemmRole& r : kGemmRoles) values[r.name] = r.template_arg;
  return enum_param("role", "ROLE", "gemm1 (gather + activation) or gemm2 (fp32 rows, atomic top-k sum, or dtype rows)", "gemm1",
                    std::move(values));
}

// A completed spec's role as its code (the enum parameter has been validated against kGemmRoles).
int gemm_role_code(const KernelSpec& s) {
  const std::string& role = s.get_string("role");
  for (const GemmRole& r : kGemmRoles)
    if (role == r.name) return r.code;
  throw Error(Phase::Validate, fmt::format("{}: unknown role {}", s.family, role));
}

void check_gemm_role_activation(const KernelSpec& s, int act) {
  if (s.get_string("role") != "gemm1" && act != kActNone)
    throw Error(Phase::Validate, fmt::format("{}: role {} takes activation none, not {}", s.family,
                                             s.get_string("role"), s.get_string("activation")));
}

ParamDesc quant_param() {
  std::map<std::string, std::string> values;
  static const char* kCpp[] = {"kQuantNone",     "kQuantInt8Channel", "kQuantInt4Group", "kQuantMxfp4",
                               "kQuantFp8Block", "kQuantFp8Channel",  "kQuantFp8Tensor", "kQuantMxfp4Packed"};
  for (int code = kQuantNone; code <= kQuantMxfp4Packed; ++code)
    values[quant_name(code)] = std::string("moejit::") + kCpp[code];
  return enum_param("quant", "QUANT", "weight/activation quantization (quant_kinds.cuh)", "none", values);
}

}  // namespace

FamilyInfo moe_gemm_family() {
  FamilyInfo f;
  f.name = "moe_gemm";
  f.header = "moe/moe_gemm_sm80.cuh";
  f.doc = "grouped expert GEMM over the routing tile map (sm_80+ mma.sync, cp.async ring)";
  f.params = {
      gemm_role_param(),
      dtype_param(),
      activation_param("silu_mul"),
      quant_param(),
      int_param("block_m", "BLOCK_M", "tile rows (= routing block_m)", 64, 16, 256),
      int_param("block_n", "BLOCK_N", "tile output columns", 64, 16, 256),
      int_param("block_k", "BLOCK_K", "reduction step in elements (32..256; fp8: 64 or 128)", 64, 32, 256),
      int_param("warps_m", "WARPS_M", "warps along M", 2, 1, 8),
      int_param("warps_n", "WARPS_N", "warps along N", 2, 1, 8),
      int_param("stages", "STAGES", "cp.async ring depth (deep rings keep 4-bit decode streaming)", 3, 2, 12),
      derived_int("threads", "", "threads per CTA = 32 * warps_m * warps_n"),
      derived_int("smem_bytes", "", "dynamic shared memory per CTA"),
  };
  f.entries = {{"gemm", "moejit::moe_gemm_kernel", "moejit::MoeGemmArgs"}};
  f.derive = [](KernelSpec& s) {
    const std::int64_t bm = s.get_int("block_m"), bn = s.get_int("block_n"), bk = s.get_int("block_k");
    const std::int64_t wm = s.get_int("warps_m"), wn = s.get_int("warps_n"), stages = s.get_int("stages");
    const int act = activation_code(s);
    const bool gated = activation_is_gated(act);
    check_gemm_role_activation(s, act);
    const int quant = parse_quant(s.get_string("quant"));
    if (quant_is_fp8(quant)) {
      if (!arch_has_fp8_mma(s.arch))
        throw Error(Phase::Validate, fmt::format("moe_gemm: quant {} needs e4m3 mma (sm_89 or newer), not {}",
                                                 s.get_string("quant"), s.arch));
      if (bk != 64 && bk != 128)
        throw Error(Phase::Validate, fmt::format("moe_gemm: block_k = {} must be 64 or 128 for fp8", bk));
      if (quant == kQuantFp8Block && bk != kQuantFp8BlockSize)
        throw Error(Phase::Validate,
                    fmt::format("moe_gemm: block_k = {} must be {} for fp8_block (one k tile per scale block)", bk,
                                kQuantFp8BlockSize));
    } else if (bk != 32 && bk != 64 && bk != 128 && bk != 256) {
      throw Error(Phase::Validate, fmt::format("moe_gemm: block_k = {} must be 32, 64, 128 or 256", bk));
    }
    if (bm % (16 * wm) != 0)
      throw Error(Phase::Validate, fmt::format("moe_gemm: block_m = {} is not a multiple of 16 * warps_m = {}", bm, 16 * wm));
    if (bn % (16 * wn) != 0)
      throw Error(Phase::Validate, fmt::format("moe_gemm: block_n = {} is not a multiple of 16 * warps_n = {}", bn, 16 * wn));
    if (wm * wn > 16) throw Error(Phase::Validate, fmt::format("moe_gemm: {} warps exceed 16", wm * wn));
    const std::int64_t accumulators = moe_gemm_accumulators(int(bm), int(bn), int(wm), int(wn), gated, quant);
    if (accumulators > moe_gemm_max_accumulators(gated, quant))
      throw Error(Phase::Validate,
                  fmt::format("moe_gemm: {} fp32 accumulators per thread (tile {}x{}{}{} over {}x{} warps) exceed {}: "
                              "registers would spill",
                              accumulators, bm, bn, gated ? " gated" : "", quant == kQuantFp8Block ? " fp8_block" : "",
                              wm, wn, moe_gemm_max_accumulators(gated, quant)));
    if (quant_dequantizes_b(quant)) {  // moe_gemm_sm80.cuh: dequantization units
      const std::int64_t threads = 32 * wm * wn, rows = (gated ? 2 : 1) * bn;
      const std::int64_t segs = threads > rows ? threads / rows : 1;
      const std::int64_t raw_row = bk * quant_weight_bits(quant) / 8;
      if ((threads % rows != 0 && rows % threads != 0) || raw_row % (16 * segs) != 0)
        throw Error(Phase::Validate,
                    fmt::format("moe_gemm: {} B rows of {} stored bytes per k tile cannot be shared out to {} threads "
                                "16 bytes at a time (wider block_n or block_k, or fewer warps)",
                                rows, raw_row, threads));
    }
    const std::int64_t smem = moe_gemm_smem_bytes(int(bm), int(bn), int(bk), int(stages), gated, quant);
    const std::int64_t total = smem + moe_gemm_static_smem_bytes(int(bm));
    if (total > kMaxSharedBytes)
      throw Error(Phase::Validate,
                  fmt::format("moe_gemm: {} bytes of shared memory exceed {} (fewer stages or a smaller tile)", total,
                              kMaxSharedBytes));
    s.params["threads"] = 32 * wm * wn;
    s.params["smem_bytes"] = smem;
  };
  return f;
}

FamilyInfo moe_gemm_swap_ab_family() {
  FamilyInfo f;
  f.name = "moe_gemm_swap_ab";
  f.header = "moe/moe_gemm_swap_ab.cuh";
  f.doc = "decode grouped expert GEMM: weights on the mma's M side, loaded and dequantized in registers";
  f.params = {
      gemm_role_param(),
      dtype_param(),
      activation_param("silu_mul"),
      quant_param(),
      int_param("block_m", "BLOCK_M", "tile rows = tokens per tile (= routing block_m): 8 .. 32 in steps of 8 (wgmma: .. 64)",
                8, 8, 64),
      int_param("warps_n", "WARPS_N", "warps along the output columns (16 weight rows each)", 4, 1, 16),
      int_param("warps_k", "WARPS_K", "warps along k (their partial sums are added in shared memory)", 2, 1, 16),
      int_param("stages", "STAGES", "k blocks in flight per warp (its cp.async ring in shared memory)", 4, 1, 16),
      int_param("wgmma", "WGMMA",
                "1: the tokens' activations staged in shared memory and a warpgroup MMA with the dequantized "
                "weights from registers (sm_90a; warps_n a multiple of 4, warps_k 1, 16-bit activations)",
                0, 0, 1),
      derived_int("block_n", "", "output columns per CTA (8 per warp gated, else 16)"),
      derived_int("block_k", "", "k per block: four 16-byte loads of a weight row"),
      derived_int("threads", "", "threads per CTA = 32 * warps_n * warps_k"),
      derived_int("smem_bytes", "", "dynamic shared memory per CTA: the warps' rings of weights and activations"),
  };
  // "gemm_tiles": the atomic GEMM2 that waits for GEMM1 per row tile (MoeGemmArgs::tile_ready)
  // instead of for the whole grid; its own instance because the runtime choice between the two
  // waits cost the grid-wide one 1-4% (thirty-seventh session). Where the runtime may take it:
  // mma.sync, 16-bit activations (swap_ab_tile_handover), under dependent launch (sm_90+), CTAs of
  // fewer than 16 warps (moe_swap_ab_register_bound: the f16 MXFP4 tiles spilled 12-20 bytes with it
  // at 512 threads); the host keeps the grid-wide wait where the instance is missing.
  f.entries = {{"gemm", "moejit::moe_gemm_swap_ab_kernel", "moejit::MoeGemmArgs", "0"},
               {"gemm_tiles", "moejit::moe_gemm_swap_ab_kernel", "moejit::MoeGemmArgs", "1", [](const KernelSpec& s) {
                  return s.get_string("role") == "gemm2_atomic" && s.get_int("wgmma") == 0 &&
                         !quant_is_fp8(parse_quant(s.get_string("quant"))) && arch_has_dependent_launch(s.arch) &&
                         !moe_swap_ab_register_bound(static_cast<int>(s.get_int("warps_n") * s.get_int("warps_k")));
                }}};
  f.derive = [](KernelSpec& s) {
    const std::int64_t bm = s.get_int("block_m"), wn = s.get_int("warps_n"), wk = s.get_int("warps_k");
    const int act = activation_code(s);
    check_gemm_role_activation(s, act);
    const int quant = parse_quant(s.get_string("quant"));
    if (quant_is_fp8(quant) && !arch_has_fp8_mma(s.arch))
      throw Error(Phase::Validate, fmt::format("moe_gemm_swap_ab: quant {} needs e4m3 conversions (sm_89 or newer), not {}",
                                               s.get_string("quant"), s.arch));
    if (bm % 8 != 0)
      throw Error(Phase::Validate, fmt::format("moe_gemm_swap_ab: block_m = {} is not a multiple of 8", bm));
    if (wn * wk > 16) throw Error(Phase::Validate, fmt::format("moe_gemm_swap_ab: {} warps exceed 16", wn * wk));
    const bool wgmma = s.get_int("wgmma") != 0;
    if (!wgmma && bm > 32)
      throw Error(Phase::Validate, fmt::format("moe_gemm_swap_ab: block_m = {} exceeds 32 (the wgmma variant takes 64)", bm));
    if (wgmma) {
      if (!arch_has_wgmma(s.arch))
        throw Error(Phase::Validate, fmt::format("moe_gemm_swap_ab: wgmma = 1 needs sm_90a, not {}", s.arch));
      if (wk != 1 || wn % 4 != 0)
        throw Error(Phase::Validate,
                    fmt::format("moe_gemm_swap_ab: wgmma = 1 takes whole warpgroups along the columns and one warp "
                                "along k (warps_n a multiple of 4, warps_k 1), not {} x {}",
                                wn, wk));
      if (quant_is_fp8(quant))
        throw Error(Phase::Validate,
                    fmt::format("moe_gemm_swap_ab: wgmma = 1 stages 16-bit activations; quant {} has e4m3 ones",
                                s.get_string("quant")));
    }
    const int stages = int(s.get_int("stages"));
    const int regs = wgmma ? moe_swap_ab_wgmma_data_registers(int(bm), stages, quant, int(wn), parse_dtype(s.get_string("dtype")))
                           : moe_swap_ab_data_registers(int(bm), stages, quant);
    const int reg_limit = static_cast<int>(std::min<std::int64_t>(255, 65536 / (32 * wn * wk)));
    if (regs > moe_swap_ab_max_data_registers(reg_limit))
      throw Error(Phase::Validate,
                  fmt::format("moe_gemm_swap_ab: {} registers of weights, scales, activations and sums per thread "
                              "({} stages of {}-bit weights, {} tokens) exceed {} at {} threads: registers would "
                              "spill (fewer stages, tokens or warps)",
                              regs, stages, quant_weight_bits(quant), bm,
                              moe_swap_ab_max_data_registers(reg_limit), 32 * wn * wk));
    const std::int64_t smem = moe_swap_ab_static_smem_bytes(int(bm), int(wn), int(wk));
    if (smem > kMaxStaticSharedBytes)
      throw Error(Phase::Validate,
                  fmt::format("moe_gemm_swap_ab: {} bytes of static shared memory (the partial sums of {} x {} warps "
                              "over {} tokens) exceed {}",
                              smem, wn, wk, bm, kMaxStaticSharedBytes));
    s.params["block_n"] = std::int64_t(moe_swap_ab_block_n(int(wn), activation_is_gated(act)));
    s.params["block_k"] = std::int64_t(moe_swap_ab_block_k());
    s.params["threads"] = 32 * wn * wk;
    s.params["smem_bytes"] = std::int64_t(moe_swap_ab_smem_bytes(int(wn * wk), stages, quant, int(bm), wgmma, int(wk)));
  };
  return f;
}

FamilyInfo moe_gemm_wgmma_family() {
  FamilyInfo f;
  f.name = "moe_gemm_wgmma";
  f.header = "moe/moe_gemm_wgmma.cuh";
  f.doc = "prefill grouped expert GEMM on sm_90a warpgroup MMA (wgmma from a swizzled cp.async ring)";
  f.params = {
      gemm_role_param(),
      dtype_param(),
      activation_param("silu_mul"),
      quant_param(),
      int_param("block_m", "BLOCK_M", "tile rows (= routing block_m): 64 or 128, one warpgroup per 64", 128, 64, 128),
      int_param("block_n", "BLOCK_N", "tile output columns (gated: x2 weight rows; wgmma N = 64..256)", 128, 32, 256),
      int_param("stages", "STAGES", "cp.async ring depth (one slot in the wgmma, one landing, the rest loading)", 4, 3, 8),
      int_param("persistent", "PERSISTENT",
                "1: persistent CTAs, a producer warpgroup feeding the ring across tiles (mbarriers); 0: a CTA per tile",
                0, 0, 1),
      int_param("staged_epilogue", "STAGED",
                "1 (persistent only): the epilogue stages each tile in shared memory of its own beside the ring and "
                "stores rows by bulk copies; 0: fragment-order stores straight to global memory",
                0, 0, 1),
      int_param("pingpong", "PINGPONG",
                "1 (persistent, block_m 64): two consumer warpgroups take alternate tiles, their k loops in turn, so "
                "that one's epilogue runs under the other's wgmmas; 0: one consumer warpgroup per 64 rows of a tile",
                0, 0, 1),
      int_param("multicast", "MULTICAST",
                "1 (persistent gated GEMM1): clusters of two CTAs on pairs of one expert's row tiles, each CTA "
                "copying one weight box (gate / up) into both (launched with cluster dims 2); 0: no clusters",
                0, 0, 1),
      derived_int("block_k", "", "k per tile: one 128-byte swizzled row (64 16-bit or 128 e4m3 elements)"),
      derived_int("threads", "",
                  "threads per CTA = 128 per 64 rows (ping-pong: per group's tile) (+ 128 producer threads when "
                  "persistent; 256 for weight-only formats)"),
      derived_int("b_tma", "",
                  "1: weight tiles by bulk tensor copies (persistent, 16-bit / fp8 weights; the host passes a tensor "
                  "map in MoeGemmArgs::b_tensor_map); 0: by cp.async (weight-only formats: dequantized by the "
                  "producer warpgroup)"),
      derived_int("a_tma", "",
                  "1: A tiles by bulk tensor copies too (GEMM2 with b_tma: the intermediate by padded row; "
                  "MoeGemmArgs::a_tensor_map)"),
      derived_int("smem_bytes", "", "dynamic shared memory per CTA"),
  };
  // __grid_constant__: the copy engine reads the weights' tensor map in the parameter itself.
  f.entries = {{"gemm", "moejit::moe_gemm_wgmma_kernel", "const __grid_constant__ moejit::MoeGemmArgs"}};
  f.derive = [](KernelSpec& s) {
    const std::int64_t bm = s.get_int("block_m"), bn = s.get_int("block_n"), stages = s.get_int("stages");
    const int act = activation_code(s);
    check_gemm_role_activation(s, act);
    if (!arch_has_wgmma(s.arch))
      throw Error(Phase::Validate, fmt::format("moe_gemm_wgmma: wgmma needs sm_90a, not {}", s.arch));
    const int quant = parse_quant(s.get_string("quant"));
    const bool persistent = s.get_int("persistent") != 0;
    const bool dequant = quant_dequantizes_b(quant);
    if (dequant && (!persistent || s.get_int("multicast") != 0 || s.get_int("pingpong") != 0))
      throw Error(Phase::Validate,
                  fmt::format("moe_gemm_wgmma: quant {} (weights dequantized by the producer warpgroup) needs the "
                              "persistent variant without multicast or ping-pong (persistent {}, multicast {}, "
                              "pingpong {})",
                              s.get_string("quant"), persistent ? 1 : 0, s.get_int("multicast"), s.get_int("pingpong")));
    if (bm != 64 && bm != 128)
      throw Error(Phase::Validate, fmt::format("moe_gemm_wgmma: block_m = {} must be 64 or 128", bm));
    // The persistent variant's work queue hands items out kMoeWorkQueueDepth claims ahead of their
    // reuse, which must outlast the producer's run ahead (the ring) by two items.
    if (persistent && stages + 2 > kMoeWorkQueueDepth)
      throw Error(Phase::Validate,
                  fmt::format("moe_gemm_wgmma: the persistent variant keeps at most {} stages (stages = {}): its work "
                              "queue of {} entries must outlast the ring by two items",
                              kMoeWorkQueueDepth - 2, stages, int(kMoeWorkQueueDepth)));
    const bool gated = activation_is_gated(act);
    const std::int64_t b_rows = (gated ? 2 : 1) * bn;
    // Weight-only 128-row tiles of more than 128 weight rows split each k step's wgmma into two
    // m64n128 halves (ptxas checks an instruction's registers against the 512-thread launch bound).
    if (dequant && bm == 128 && b_rows > 128 && b_rows != 256)
      throw Error(Phase::Validate,
                  fmt::format("moe_gemm_wgmma: quant {} on 128-row tiles takes 64, 128 or 256 weight rows per tile "
                              "(block_n {}{}: {}): wider tiles run as two halves of 128",
                              s.get_string("quant"), bn, gated ? ", gated" : "", b_rows));
    if (b_rows % 64 != 0 || b_rows > 256)
      throw Error(Phase::Validate,
                  fmt::format("moe_gemm_wgmma: {} weight rows per tile (block_n {}{}) must be 64, 128, 192 or 256", b_rows,
                              bn, gated ? ", gated" : ""));
    // 128 x 128 block scales: each scale slot's weight rows of a tile in one block (a set's
    // block_n rows, or each 128 of them; the scale is one number per slot and k tile).
    if (quant == kQuantFp8Block && ((128 % bn != 0 && bn % 128 != 0) || activation_is_interleaved(act)))
      throw Error(Phase::Validate,
                  fmt::format("moe_gemm_wgmma: fp8_block needs block_n dividing 128 or a multiple of it, and gate / up "
                              "rows stacked (block_n {}{}, {})",
                              bn, gated ? " gated" : "", s.get_string("activation")));
    // Every fp8 format keeps each k tile's sums in a second accumulator set (quant_promotes_k_tiles;
    // moe_gemm_wgmma_persistent.cuh, WIDE, for 256 rows: whole chunks of 128).
    if (quant_promotes_k_tiles(quant) && b_rows > 128 &&
        (b_rows % 128 != 0 || b_rows > moe_wgmma_promoted_max_b_rows(int(bm), persistent)))
      throw Error(Phase::Validate,
                  fmt::format("moe_gemm_wgmma: {} takes at most 128 weight rows per tile, or 256 on the persistent "
                              "variant's 128-row tiles (block_n {}{}: {}, block_m {}, persistent {}): each k tile's "
                              "e4m3 sums are kept apart in a second accumulator set",
                              s.get_string("quant"), bn, gated ? ", gated" : "", b_rows, bm, persistent ? 1 : 0));
    const int role = gemm_role_code(s);
    const bool staged = s.get_int("staged_epilogue") != 0;
    if (staged && !persistent)
      throw Error(Phase::Validate, "moe_gemm_wgmma: staged_epilogue = 1 is the persistent variant's (the plain one "
                                   "always stages its tile in the idle ring)");
    if (staged && moe_wgmma_staging_bytes(role, int(bm), int(bn), int(stages), gated, true, quant) == 0)
      throw Error(Phase::Validate,
                  fmt::format("moe_gemm_wgmma: the staged epilogue's {} x {} tile ({} bytes) does not fit beside {} "
                              "ring slots in {} bytes of shared memory (fewer stages or a smaller tile)",
                              bm, bn + 8, bm * (bn + 8) * moe_wgmma_out_bytes(role), stages, kMaxSharedBytes));
    const bool pingpong = s.get_int("pingpong") != 0;
    if (pingpong && (!persistent || bm != 64 || staged || quant_scales_in_epilogue(quant)))
      throw Error(Phase::Validate,
                  fmt::format("moe_gemm_wgmma: pingpong = 1 needs the persistent variant, block_m 64, no staged "
                              "epilogue and no per-channel / per-tensor fp8 scales (persistent {}, block_m {}, "
                              "staged_epilogue {}, quant {})",
                              persistent ? 1 : 0, bm, staged ? 1 : 0, s.get_string("quant")));
    const bool multicast = s.get_int("multicast") != 0;
    if (multicast && (!persistent || role != kRoleGemm1 || !gated || pingpong))
      throw Error(Phase::Validate,
                  fmt::format("moe_gemm_wgmma: multicast = 1 needs the persistent variant's GEMM1 with a gated "
                              "activation and no ping-pong groups (persistent {}, role {}, activation {}, pingpong {})",
                              persistent ? 1 : 0, s.get_string("role"), s.get_string("activation"), pingpong ? 1 : 0));
    const std::int64_t smem = moe_wgmma_smem_bytes(role, int(bm), int(bn), int(stages), gated, staged, quant);
    const std::int64_t static_smem = moe_wgmma_static_smem_bytes(moe_wgmma_rows_held(int(bm), pingpong));
    if (smem + static_smem > kMaxSharedBytes)
      throw Error(Phase::Validate,
                  fmt::format("moe_gemm_wgmma: {} bytes of shared memory exceed {} (fewer stages or a smaller tile)",
                              smem + static_smem, kMaxSharedBytes));
    s.params["block_k"] = std::int64_t(moe_wgmma_block_k(quant));
    s.params["threads"] =
        std::int64_t(moe_wgmma_threads(int(bm), persistent, pingpong, quant, parse_dtype(s.get_string("dtype"))));
    s.params["b_tma"] = std::int64_t(moe_wgmma_b_by_tma(persistent, quant) ? 1 : 0);
    s.params["a_tma"] = std::int64_t(moe_wgmma_a_by_tma(role, persistent) ? 1 : 0);
    s.params["smem_bytes"] = smem;
  };
  return f;
}

FamilyInfo moe_activation_family() {
  FamilyInfo f;
  f.name = "moe_activation";
  f.header = "moe/moe_epilogue.cuh";
  f.doc = "stand-alone activation of the unfused mode: [rows, 2N or N] -> [rows, N]";
  f.params = {dtype_param(), activation_param("silu_mul"),
              derived_int("threads", "THREADS", "threads per CTA")};
  f.entries = {{"activation", "moejit::moe_activation_kernel", "moejit::MoeActivationArgs"}};
  f.derive = [](KernelSpec& s) {
    if (activation_code(s) == kActNone)
      throw Error(Phase::Validate, "moe_activation: activation none has nothing to compute");
    s.params["threads"] = kElementwiseThreads;
  };
  return f;
}

FamilyInfo moe_reduce_family() {
  FamilyInfo f;
  f.name = "moe_reduce";
  f.header = "moe/moe_epilogue.cuh";
  f.doc = "top-k sum of per-slot fp32 (deterministic) or dtype rows in slot order, the fp32 -> dtype cast, and "
          "GEMM1's A rows gathered into padded-row order";
  f.params = {dtype_param(), int_param("top_k", "TOPK", "experts per token", std::nullopt, 1, 32),
              derived_int("threads", "THREADS", "threads per CTA")};
  f.entries = {{"reduce", "moejit::moe_reduce_kernel", "moejit::MoeReduceArgs"},
               {"reduce16", "moejit::moe_reduce16_kernel", "moejit::MoeReduceArgs"},
               {"cast", "moejit::moe_cast_kernel", "moejit::MoeReduceArgs"},
               {"gather", "moejit::moe_gather_rows_kernel", "moejit::MoeGatherArgs"}};
  f.derive = [](KernelSpec& s) { s.params["threads"] = kElementwiseThreads; };
  return f;
}

FamilyInfo moe_act_quant_family() {
  FamilyInfo f;
  f.name = "moe_act_quant";
  f.header = "moe/moe_act_quant.cuh";
  f.doc = "fp8 e4m3 quantization of activations per token (per 128 columns, per row, or a static scale)";
  f.params = {dtype_param(),
              enum_param("mode", "MODE", "scale granularity", "group128",
                         {{"group128", "moejit::kActQuantGroup128"},
                          {"row", "moejit::kActQuantRow"},
                          {"static", "moejit::kActQuantStatic"}}),
              derived_int("threads", "THREADS", "threads per CTA")};
  f.entries = {{"quantize", "moejit::moe_act_quant_kernel", "moejit::MoeActQuantArgs"}};
  f.derive = [](KernelSpec& s) {
    if (!arch_has_fp8_mma(s.arch))
      throw Error(Phase::Validate, fmt::format("moe_act_quant: e4m3 conversion needs sm_89 or newer, not {}", s.arch));
    s.params["threads"] = kElementwiseThreads;
  };
  return f;
}

FamilyInfo fill_random_family() {
  FamilyInfo f;
  f.name = "fill_random";
  f.header = "common/fill_random.cuh";
  f.doc = "device-side uniform random fill (benchmark and tuning buffers)";
  f.params = {enum_param("type", "OUT_TYPE", "element type written", "bf16",
                         {{"bf16", "moejit::kFillBF16"}, {"f16", "moejit::kFillF16"}, {"f32", "moejit::kFillF32"}})};
  f.entries = {{"fill", "moejit::fill_random_kernel", "moejit::FillRandomArgs"}};
  return f;
}

// The decode GEMV pair: the fused layer for <= kMoeDecodeMaxTokens tokens in two launches, the
// routing picked inside both (so routing_topk's parameters, from the layer's router config).
FamilyInfo moe_decode_gemv_family() {
  FamilyInfo f;
  f.name = "moe_decode_gemv";
  f.header = "moe/moe_decode_gemv.cuh";
  f.doc = "fused MoE layer for a few tokens: routing + GEMM1 + activation (gemv1), GEMM2 + top-k sum (gemv2)";
  f.params = {dtype_param(), activation_param("silu_mul"), quant_param(),
              int_param("top_k", "TOPK", "experts per token", std::nullopt, 1, 32),
              int_param("hidden", "HIDDEN", "hidden size K (a multiple of 8)", std::nullopt, 8, 1 << 16),
              int_param("intermediate", "INTER", "intermediate size N (a multiple of 8)", std::nullopt, 8, 1 << 16)};
  for (const ParamDesc& p : routing_topk_family().params)  // num_experts .. logit_dtype; not top_k, warps
    if (p.name != "top_k" && p.name != "warps") f.params.push_back(p);
  f.params.push_back(derived_int("threads", "", "threads per CTA"));
  auto splits = [](const KernelSpec& s) {
    return moe_decode_gemv2_splits(parse_quant(s.get_string("quant")), static_cast<int>(s.get_int("top_k")),
                                   static_cast<int>(s.get_int("intermediate")));
  };
  auto span = [](const KernelSpec& s) {
    return moe_decode_gemv_span_wanted(parse_quant(s.get_string("quant")), static_cast<int>(s.get_int("top_k")),
                                       static_cast<int>(s.get_int("hidden")), static_cast<int>(s.get_int("intermediate")));
  };
  f.entries = {{"gemv1", "moejit::moe_decode_gemv1_kernel", "moejit::MoeDecodeArgs"},
               // gemv2 in batches of 10 split items, or of 8 (from kMoeDecodeManyTokens tokens on);
               // without split items the batch size changes nothing: gemv2 alone
               {"gemv2", "moejit::moe_decode_gemv2_kernel", "moejit::MoeDecodeArgs", "10"},
               {"gemv2_many", "moejit::moe_decode_gemv2_kernel", "moejit::MoeDecodeArgs", "8", splits},
               // fp8_block: the same with each CTA's shared memory holding its own tokens' rows only
               {"gemv1_span", "moejit::moe_decode_gemv1_kernel", "moejit::MoeDecodeArgs", "true", span},
               {"gemv2_span", "moejit::moe_decode_gemv2_kernel", "moejit::MoeDecodeArgs", "10, true", span},
               {"gemv2_many_span", "moejit::moe_decode_gemv2_kernel", "moejit::MoeDecodeArgs", "8, true",
                [=](const KernelSpec& s) { return span(s) && splits(s); }}};
  f.derive = [](KernelSpec& s) {
    derive_topk_selection(s, "moe_decode_gemv");
    const int quant = parse_quant(s.get_string("quant"));
    if (quant != kQuantNone && quant != kQuantFp8Block)
      throw Error(Phase::Validate, fmt::format("moe_decode_gemv: quant {} is not supported (none or fp8_block)",
                                               s.get_string("quant")));
    if (quant == kQuantFp8Block && !arch_has_fp8_mma(s.arch))
      throw Error(Phase::Validate, fmt::format("moe_decode_gemv: fp8_block needs e4m3 conversions (sm_89 or newer), not {}",
                                               s.arch));
    const std::int64_t chunk = moe_decode_chunk_elements(quant);
    for (const char* name : {"hidden", "intermediate"})
      if (s.get_int(name) % chunk != 0)
        throw Error(Phase::Validate, fmt::format("moe_decode_gemv: {} = {} is not a multiple of {} (16-byte loads)", name,
                                                 s.get_int(name), chunk));
    s.params["threads"] = std::int64_t(kMoeDecodeThreads);
  };
  return f;
}

}  // namespace moejit
