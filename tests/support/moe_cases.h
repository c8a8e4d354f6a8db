// The MoE layers the GPU tests run, in one place, so the CPU tests can compile every kernel those
// tests launch (CI has no GPU but must compile every specialization).
#pragma once

#include <string>
#include <vector>

#include "autotune/moe_heuristic.h"
#include "runtime/moe_spec.h"

namespace moejit::test {

struct MoeCase {
  std::string name;
  MoeSpec spec;
  std::vector<int> token_counts;  // forwards the test runs
};

// A layer of the given shape (the other MoeSpec fields at their defaults).
MoeSpec small_layer(int experts, int top_k, int hidden, int intermediate, MoeActivation act = kActSiluMul,
                    MoeDType dtype = kDTypeBF16, MoeQuant quant = kQuantNone);

// Qwen3-30B-A3B's expert shape: E = 128, top_k = 8, K = 2048, N = 768 (bf16, silu_mul).
inline MoeSpec qwen3_30b_a3b_layer() { return small_layer(128, 8, 2048, 768); }

// Small layer (E=8, top_k=2, K=192, N=80: tails in K and N) in every combination of activation x
// dtype x bias x router weight position x fused/unfused x fast/deterministic.
std::vector<MoeCase> moe_matrix_cases();
// Model-shaped layers: reduced Mixtral, Qwen3-MoE, gpt-oss-20b, DeepSeek-V2-Lite, an odd one.
std::vector<MoeCase> moe_model_cases();
// Expert parallelism, determinism, graphs, hooks.
std::vector<MoeCase> moe_mode_cases();
// Quantized experts: every MoeQuant on small layers with K / N tails (both dtypes, gated and not,
// bias, unfused, deterministic), gpt-oss-20b in MXFP4 and a DeepSeek-V3-like fp8_block layer.
std::vector<MoeCase> moe_quant_cases();

// Layers whose decode GEMV items (gemv1: a weight row; gemv2: a token's top_k intermediate rows)
// are at most half a CTA's 16-byte loads, so a step reads several side by side (split_items):
// fp8_block and 16-bit weights, gated / interleaved / single activations, biases; and a
// DeepSeek-style fp8_block layer where gemv1's rounding shows through the intermediate's
// quantization. Tokens 1 and 7.
std::vector<MoeCase> moe_decode_gemv_cases();

// Split-K (fast mode) layers: E=8, top_k=2 with K / N tails; silu_mul, swigluoai and relu2 with
// biases, block-scaled fp8 and MXFP4 weights. Tokens 1, 3, 17.
std::vector<MoeCase> moe_split_k_cases();

// The swap-AB decode kernel (fast mode) on small layers in every weight format, both dtypes, gated
// / interleaved / single-input activations, biases, unfused, top_k 1; block_m 8, 16 and 32 with
// several warp layouts and ring depths, GEMM2 split across CTAs. Tokens 1, 7, 40.
struct MoeKernelCase {
  MoeSpec spec;
  MoeTileConfig config;
  std::vector<int> token_counts;
};
std::vector<MoeKernelCase> moe_swap_ab_cases();
// The swap-AB kernel's wgmma variant (sm_90a): the layers of moe_swap_ab_cases with 16-bit
// activations, 8 .. 64 tokens a tile, batches that fill several tiles an expert.
std::vector<MoeKernelCase> moe_swap_ab_wgmma_cases();
// The sm_90a wgmma kernel (fast mode, 16-bit weights) on small layers: both dtypes, gated stacked
// / interleaved / single-input activations, biases, unfused, router weight on input with top_k 1,
// K / N tails; block_m 64 and 128, wgmma N 128 / 192 / 256, ring depths 3..6, GEMM2 split across
// CTAs, plain and persistent; fp8 w8a8 with block / channel / tensor scales on both variants.
// Tokens 40 and 300 (several row tiles per expert).
std::vector<MoeKernelCase> moe_wgmma_cases();
// Weight-only formats (int8, int4, MXFP4) on the persistent wgmma kernel (dequantized by its
// producer warpgroup): K tails, every activation kind, f16, zero points, unfused, staged / split /
// pregathered variants, M up to 8000.
std::vector<MoeKernelCase> moe_wgmma_dequant_cases();
// The fast mode's large batches, where GEMM2 stores per-slot DTYPE rows summed by reduce16
// (moe_gemm2_stores_rows16): bf16, fp8_block and int4 weights with biases on the shared-memory, swap-AB and
// wgmma (plain, persistent) kernels, M = 1024.
std::vector<MoeKernelCase> moe_rows16_cases();

// Every tile config the tuner may pick (for a device with 227 KiB of shared memory per CTA), on
// layers with K and N tails, gated and not: each must compute the same function.
struct MoeTileCase {
  MoeSpec spec;
  MoeTileConfig config;
};
std::vector<MoeTileCase> moe_tile_sweep_cases();
// The same over quantized layers (int4 g32, mxfp4, fp8_block, fp8_channel; gated with bias, K and
// N tails) at block_m 16, 64 and 128.
std::vector<MoeTileCase> moe_quant_tile_sweep_cases(int max_shared_optin, const std::string& arch);

}  // namespace moejit::test
