// moe_gemm, sm_90a warpgroup-MMA path: the persistent, warp-specialized variant (moe_gemm_wgmma.cuh
// instantiates it): a producer warpgroup feeding a ring of bulk tensor copies (and GEMM1's gathered
// A rows by cp.async) across the tiles a CTA walks, consumer warpgroups multiplying and storing.
#pragma once

#include "moe/moe_gemm_wgmma_dequant.cuh"
#include "moe/moe_gemm_wgmma_parts.cuh"
#include "moe/moe_tile_rows.cuh"

namespace moejit {
namespace moe_wgmma_detail {

#if MOEJIT_HAS_WGMMA
// Persistent, warp-specialized: warpgroup 0 produces (cp.async into the ring, each thread's
// copies signalling the slot's `full` barrier as they land), the others consume (wait for `full`,
// wgmma, release the slot through `empty` once the wgmma that read it is done). The CTA walks
// work items blockIdx.x, + gridDim.x, ... of the grouped walk, or those it claims from the work
// queue (MoeGemmArgs::work_counter); the producer runs up to STAGES k tiles ahead, across row
// tiles, so the next tile's loads overlap this tile's epilogue and no tile starts with an empty
// pipeline.
// PINGPONG (64-row tiles): two consumer warpgroups ("groups") take the CTA's items in turn, each a
// whole tile with row arrays of its own; a group starts its k loop once the other has issued the
// last wgmma of the item before (turn barriers), so the k loops alternate and each group's epilogue
// runs under the other's wgmmas. The turns also keep a group from waiting on a slot's `full` barrier
// more than one phase ahead of the producer (its parity would then pass on an older phase).
// MULTICAST (gated GEMM1): CTAs 2c and 2c + 1 form a cluster and walk pairs of row tiles (2p, 2p + 1)
// of one column tile together. Where both are one expert's, rank 0 copies the gate box and rank 1
// the up box of every k tile, each multicast into both CTAs' ring (each CTA's `full` barrier still
// expects the whole B stage; the peer's bytes land in the phase they belong to, since the peer
// copies only once this CTA's consumers have freed the slot); else each loads both boxes itself.
// Every consumer warp also arrives on the peer's `empty` barrier, so that a slot is refilled only
// once both CTAs are done with it. A pair's missing second tile (odd tile count) runs as zero rows
// that store nothing. Each weight tile then leaves L2 once per pair, not once per row tile.
// Weight-only formats (DEQUANT): every producer thread copies its share of the stored weights and
// writes them, dequantized, into the ring slot (WeightDequantizer); the slot's `full` barrier then
// also waits for each producer thread's arrival after its stores.
template <int ROLE, int DTYPE, int ACT, int QUANT, int BLOCK_M, int BLOCK_N, int STAGES, bool STAGED, bool PINGPONG,
          bool MULTICAST>
__device__ inline void persistent_tiles(const MoeGemmArgs& args, unsigned char* s_a, int kt_begin, int local_tiles,
                                        int* s_slot, int* s_arow, float* s_weight, unsigned long long* bars,
                                        int* s_queue, unsigned long long* s_queue_bars) {
  using T = Tile<ROLE, DTYPE, ACT, BLOCK_M, BLOCK_N, STAGES>;
  constexpr int GROUPS = PINGPONG ? 2 : 1;                      // consumer groups on different tiles
  constexpr int TILE_THREADS = T::CONSUMER_THREADS;             // consumer threads of one tile
  constexpr int CONSUMERS = GROUPS * TILE_THREADS;
  static_assert(!PINGPONG || BLOCK_M == 64, "ping-pong groups are one warpgroup each");
  static_assert(!MULTICAST || (ROLE == kRoleGemm1 && T::G == 2 && !PINGPONG),
                "multicast: gated GEMM1 (a box per rank), one consumer group");
  constexpr bool EPILOGUE_SCALED = quant_scales_in_epilogue(QUANT);
  constexpr bool BLOCK_SCALED = QUANT == kQuantFp8Block;
  constexpr bool PROMOTED = quant_promotes_k_tiles(QUANT);  // fp8: a k tile's sums apart, then into d
  // Registers after setmaxnreg (two consumer warpgroups): the producer keeps its rows and their
  // addresses (24 at most: 136; fp8 tiles, <= 128 weight rows: 16, 96), the consumers the
  // accumulators and the epilogue (176; fp8: a second accumulator set, 200). The CTA starts
  // with LAUNCH_REGS per thread (launch bounds: 384 threads, one CTA per SM); a consumer's
  // setmaxnreg.inc waits until the producer's .dec has returned enough of them, so what the
  // consumers gain must not exceed what the producer gives back (else it waits forever).
  // Weight-only formats (DEQUANT): two producer warpgroups (512 threads, 128 registers each at
  // launch), enough for <= 128 weight rows without register moves; 128-row tiles of 256 weight rows
  // (DEQUANT_WIDE) move 40 registers a thread from the dequantizing producers (88: 80 spilled 44-80
  // bytes of MXFP4 / int4 producers) to the consumers (168) for their 128 accumulators; int4's
  // producers keep 96 (at 88 its gated GEMM1 spilled 32 bytes), its consumers 160 (96 / 160 for
  // every format spilled 4-8 bytes of MXFP4-into-f16 and int8 consumers; int4 Qwen3-30B-A3B ran
  // 0-1% faster at 96 / 160, H100).
  constexpr bool DEQUANT = quant_dequantizes_b(QUANT);
  constexpr int PRODUCERS = moe_wgmma_producer_threads(QUANT, BLOCK_M, DTYPE);  // producer threads: warpgroups 0 ..
  constexpr bool DEQUANT_WIDE = DEQUANT && CONSUMERS == 256 && T::B_ROWS > 128;
  static_assert(!DEQUANT_WIDE || T::B_ROWS == 256, "weight-only 128-row tiles: 256 weight rows as two halves of 128");
  // Weight-only 64-row tiles: four producer warpgroups (640 threads: 96 registers at launch) give
  // the consumer warpgroup its accumulators (80 / 160).
  constexpr bool DEQUANT_64 = DEQUANT && BLOCK_M == 64 && PRODUCERS == 512;
  constexpr bool MOVE_REGS = (CONSUMERS == 256 && (!DEQUANT || DEQUANT_WIDE)) || DEQUANT_64;  // setmaxnreg
  constexpr int LAUNCH_REGS = 65536 / (CONSUMERS + PRODUCERS) / 8 * 8;
  // A k tile's wgmmas in chunks of weight rows where a tile has more than 128 and either
  // - fp8 (WIDE) keeps one k tile's sums a chunk of 128 at a time: m64n128 wgmmas per chunk, each
  //   chunk waited for and promoted before the next is issued, so the second accumulator set stays
  //   at 64 registers beside d's 128. The consumers then take 224 registers, and the producer (bulk
  //   tensor copies; GEMM1's gathered A rows by cp.async, 8 rows) gives back down to 56. The wider
  //   tile reads a k tile's A rows once for twice the weight rows: ncu (H100, fp8_block DeepSeek-V3
  //   M = 8192, 128 x 128 weight-row tiles) had both GEMMs at 90-96% of L2 throughput and 43-48% of
  //   the SM's;
  // - or one wgmma's accumulators (B_ROWS / 2 a thread, plus its operands) exceed the launch bound's
  //   registers: ptxas checks each instruction against them (128 at 512 threads, 96 at 640) whatever
  //   setmaxnreg gives. Weight-only tiles of 256 weight rows then run m64n128 halves, 64-row tiles
  //   of 192 three m64n64 chunks.
  constexpr bool CHUNKED = T::B_ROWS > 128 && (PROMOTED || T::B_ROWS / 2 + 16 > LAUNCH_REGS);
  constexpr int CHUNK_ROWS = !CHUNKED ? T::B_ROWS : PROMOTED || T::B_ROWS % 128 == 0 ? 128 : 64;
  constexpr int CHUNKS = T::B_ROWS / CHUNK_ROWS;
  constexpr bool WIDE = PROMOTED && CHUNKS > 1;
  static_assert(CHUNKS * CHUNK_ROWS == T::B_ROWS, "whole chunks");
  constexpr bool INT4_WIDE = DEQUANT_WIDE && QUANT == kQuantInt4Group;  // its scale + zero point: 96 / 160
  constexpr int PRODUCER_REGS = DEQUANT_64 ? 80 : INT4_WIDE ? 96 : DEQUANT_WIDE ? 88 : WIDE ? 56 : PROMOTED ? 96 : 136;
  constexpr int CONSUMER_REGS = DEQUANT_64 ? 160 : WIDE ? 224 : PROMOTED ? 200 : INT4_WIDE ? 160 : DEQUANT_WIDE ? 168 : 176;
  static_assert(!MOVE_REGS || PRODUCERS * (LAUNCH_REGS - PRODUCER_REGS) >= CONSUMERS * (CONSUMER_REGS - LAUNCH_REGS),
                "the consumers' registers come from the producers'");
  static_assert(!PROMOTED || WIDE || (BLOCK_M + T::B_ROWS) * 8 / 128 <= 16, "the producer's 96 registers hold 16 rows");
  static_assert(!PROMOTED || T::B_ROWS <= moe_wgmma_promoted_max_b_rows(BLOCK_M, true), "the host's limit");
  static_assert(!WIDE || (MOVE_REGS && BLOCK_M * 8 / 128 <= 8), "the producer's 56 registers hold 8 A rows");
  static_assert(moe_wgmma_b_by_tma(true, QUANT) != DEQUANT,
                "the persistent variant reads 16-bit / fp8 weight tiles by bulk tensor copies");
  static_assert(!DEQUANT || (!MULTICAST && !PINGPONG), "weight-only formats: one consumer group, no clusters");
  constexpr bool A_TMA = moe_wgmma_a_by_tma(ROLE, true);
  // GEMM1 with X gathered beforehand into padded-row order: A tiles by bulk tensor copies too.
  const bool a_tma = A_TMA || (ROLE == kRoleGemm1 && args.a_pregathered != 0);
  const int tid = threadIdx.x;
  // Multicast: this CTA's rank in its cluster of two, the cluster, and the clusters of the grid;
  // the work items walk pairs of row tiles ("units").
  const int rank = MULTICAST ? blockIdx.x & 1 : 0;
  const int first = MULTICAST ? blockIdx.x >> 1 : blockIdx.x, walkers = MULTICAST ? gridDim.x >> 1 : gridDim.x;
  const unsigned smem_a = sm80::smem_addr(s_a), smem_b = smem_a + STAGES * T::A_STAGE;
  const unsigned full0 = sm80::smem_addr(bars), empty0 = full0 + STAGES * 8;  // [STAGES] each
  // After the ring and its barriers: per-weight-row scales (256), the staged epilogue's own tile
  // (StagedTile; the host sizes shared memory with moe_wgmma_smem_bytes and refuses a staged tile
  // that does not fit), then the producers' ring of stored weights (DEQUANT).
  constexpr int COL_SCALE_AT = STAGES * (T::A_STAGE + T::B_STAGE) + STAGES * 16, OUT_AT = COL_SCALE_AT + 256 * 4;
  constexpr int RAW_AT = OUT_AT + (STAGED ? BLOCK_M * (BLOCK_N + 8) * moe_wgmma_out_bytes(ROLE) : 0);
  float* s_col_scale = reinterpret_cast<float*>(s_a + COL_SCALE_AT);
  unsigned char* s_out = s_a + OUT_AT;
  if (tid == 0) {
    if (!DEQUANT) sm90::prefetch_tensor_map(args.b_tensor_map);
    if (a_tma) sm90::prefetch_tensor_map(args.a_tensor_map);
    for (int s = 0; s < STAGES; ++s) {
      // Arrivals per fill: thread 0's expected-bytes arrival for the boxes, plus one (async) per
      // producer thread's A copies when A comes by cp.async. DEQUANT: no weight boxes (A by cp.async:
      // no expected bytes at all), one arrival per producer thread after its weight stores.
      const unsigned tx_arrivals = DEQUANT && !a_tma ? 0 : 1;
      sm90::mbar_init(full0 + s * 8, tx_arrivals + (a_tma ? 0 : PRODUCERS) + (DEQUANT ? PRODUCERS : 0));
      // One arrival per consumer thread of the tile's group (multicast: + one per consumer warp of the peer).
      sm90::mbar_init(empty0 + s * 8, TILE_THREADS + (MULTICAST ? TILE_THREADS / 32 : 0));
    }
    if constexpr (PINGPONG)  // turn0 + 8 g: group g may start its next k loop (the other group's arrivals)
      for (int g = 0; g < 2; ++g) sm90::mbar_init(sm80::smem_addr(bars) + (2 * STAGES + g) * 8, TILE_THREADS);
    for (int q = 0; q < kMoeWorkQueueDepth; ++q) sm90::mbar_init(sm80::smem_addr(s_queue_bars) + q * 8, 1);
    sm90::fence_mbar_init();
  }
  if constexpr (MULTICAST)
    sm90::cluster_sync();  // both CTAs' barriers are set up before either copies into or arrives on the other's
  else
    __syncthreads();
  const int col_tiles = (args.n_out + BLOCK_N - 1) / BLOCK_N, row_tiles = args.totals[2];
  const int units = MULTICAST ? (row_tiles + 1) / 2 : row_tiles;
  const int items = col_tiles * units;
  // Work item -> this CTA's row tile (rows_valid: inside the tile map), first column, expert, and
  // whether the pair's weight boxes are multicast (both CTAs compute the same).
  struct Work {
    int tile, n0, expert;
    bool rows_valid, multicast;
  };
  auto locate = [&](int item) {
    Work w;
    int unit;
    walk_item(args, item, col_tiles, units, BLOCK_N, unit, w.n0);
    w.tile = MULTICAST ? 2 * unit + rank : unit;
    w.rows_valid = w.tile < row_tiles;
    w.expert = args.tile_expert[w.rows_valid ? w.tile : w.tile - 1];
    w.multicast = MULTICAST && 2 * unit + 1 < row_tiles && args.tile_expert[2 * unit] == args.tile_expert[2 * unit + 1];
    return w;
  };
  // Work items: the fixed stride (this CTA's items first, first + walkers, ...), or claimed from
  // args.work_counter in walk order as the CTA gets through them. With the stride, a CTA whose
  // tiles went faster (fewer rows, an idle warpgroup) runs ahead of the CTAs that share its
  // expert's weight tiles in L2, and they read them from DRAM again; claimed items stay together.
  // Thread 0 puts each item into the work queue (s_queue, entry n % depth for the n-th claim, its
  // barrier's phase n / depth) one item ahead, having claimed it one item before that (so that the
  // atomic's round trip does not hold up the loads); every other thread reads it from there. An
  // entry is rewritten kMoeWorkQueueDepth claims later, when the producer has issued the loads of
  // the items up to the one before, so the consumers have read it: they read item n + 1 before
  // item n's first wgmma.
  // A CTA's first two items are those of the fixed stride (first, first + walkers); the counter
  // hands out the items from 2 walkers on (moe_queue_item). A CTA ends at its first item past the
  // end, dropping the take after it: that one lies past the end too (a later claim, or one past
  // 2 walkers after a stride item past the end). Claimed from the start, each CTA took its first three
  // items back to back while the grid launched, so that neighbours in the walk (an expert's row
  // tiles of one weight tile) could start one after the other on one CTA instead of side by side.
  // H100, shipped DB, same-run rounds in two calls: fp8_block DeepSeek-V3 TP8 M = 2048 / 8192
  // 764-766 / 1646-1688 -> 751-754 / 1629-1702 us; MXFP4 gpt-oss-120b and int4 Qwen3 within +-1%
  // in the second call (-2..-2.5% at M = 2048 in the first) (thirty-first session).
  const bool claimed = !MULTICAST && !PINGPONG && args.work_counter != nullptr;
  static_assert(STAGES + 2 <= kMoeWorkQueueDepth, "the work queue outlasts the ring");
  const unsigned queue0 = sm80::smem_addr(s_queue_bars);
  // Thread 0 fills entry n with the claim made before, then makes the next: entry 0 with the
  // stride's item 0 and item 1 as the claim made, every later one with a counter claim after it
  // (moe_queue_item). (A take counter of thread 0's own, or the stride test in each fill, spilled
  // the weight-only formats' 128-row tiles, whose 512 threads keep 128 registers each.)
  static_assert(kMoeQueueStrideItems == 2, "entry 0 and the claim made with it are the stride's");
  int claim = 0;  // thread 0: the claim for the entry after the next one to fill
  auto queue_fill = [&](int n) {
    s_queue[n % kMoeWorkQueueDepth] = claim;
    sm90::mbar_arrive(queue0 + (n % kMoeWorkQueueDepth) * 8);  // release: the entry is visible with the phase
  };
  auto queue_claim = [&](int n) {
    queue_fill(n);
    claim = moe_queue_item(kMoeQueueStrideItems, first, walkers, atomicAdd(args.work_counter, 1));
  };
  auto queued_item = [&](int n) {
    sm90::mbar_wait(queue0 + (n % kMoeWorkQueueDepth) * 8, (n / kMoeWorkQueueDepth) & 1);
    return static_cast<volatile int*>(s_queue)[n % kMoeWorkQueueDepth];
  };
  // The producer's walk: item 0, then each next one; thread 0 fills the next item's entry before the
  // current item's loads (so no reader waits on an entry that only later loads would let it fill).
  int produced = 0;  // claimed items read by this producer thread
  auto first_item = [&]() {
    if (!claimed) return first;
    if (tid == 0) {
      claim = moe_queue_item(0, first, walkers, 0);
      queue_fill(0);
      claim = moe_queue_item(1, first, walkers, 0);
    }
    return queued_item(produced++);
  };
  auto begin_item = [&]() {
    if (claimed && tid == 0) queue_claim(produced);
  };
  auto next_item = [&](int item) { return claimed ? queued_item(produced++) : item + walkers; };
  if (tid < PRODUCERS) {  // producer warpgroup(s)
    if constexpr (MOVE_REGS) sm90::setmaxnreg_dec<PRODUCER_REGS>();
    // Weight box g of k tile kt: the BLOCK_N weight rows of columns n0.. in set g (stacked: from n0
    // + the up rows' offset; interleaved: every second row from 2 n0 + g, the map steps by 2). Rows
    // past the expert's land as zeros; rows past n_out inside it only feed columns the epilogue
    // skips.
    // Multicast pairs: box g by rank g only, into both CTAs.
    auto load_weight_boxes = [&](int slot, int kt, int n0, int expert, bool multicast) {
#pragma unroll
      for (int g = 0; g < T::G; ++g) {
        const unsigned dst = smem_b + slot * T::B_STAGE + g * BLOCK_N * kRowBytes;
        const int row = activation_is_interleaved(ACT) ? 2 * n0 + g : n0 + g * args.up_row_offset;
        if (!multicast)
          sm90::tma_load_3d(dst, args.b_tensor_map, kt * kRowBytes, row, expert, full0 + slot * 8);
        else if (g == rank)
          sm90::tma_load_3d_multicast(dst, args.b_tensor_map, kt * kRowBytes, row, expert, full0 + slot * 8, 0x3);
      }
    };
    // A tile of k tile kt for row tile `tile`: one bulk tensor copy (GEMM2, or X gathered beforehand).
    auto load_a_box = [&](int slot, int kt, int tile) {
      sm90::tma_load_3d(smem_a + slot * T::A_STAGE, args.a_tensor_map, kt * kRowBytes, tile * BLOCK_M, 0,
                        full0 + slot * 8);
    };
    int it = 0;  // k tiles produced so far: slot it % STAGES, use it / STAGES of that slot
    if constexpr (DEQUANT) {
      using DQ = WeightDequantizer<ACT, QUANT, DTYPE, BLOCK_M, BLOCK_N, T::B_ROWS, PRODUCERS>;
      constexpr int RAW_SLOT = moe_wgmma_raw_slot_bytes(T::B_ROWS, QUANT);
      static_assert(RAW_SLOT == DQ::TOTAL * 16, "a slot holds the k tile's pieces");
      const unsigned raw0 = smem_a + RAW_AT;
      static_assert(DQ::RAW_STAGES * RAW_SLOT == moe_wgmma_raw_bytes(QUANT, BLOCK_M, T::B_ROWS), "the host sizes the raw ring");
      DQ dq;
      ChunkLoader<ROLE, ACT, QUANT, BLOCK_M, BLOCK_N, PRODUCERS, true> loader;  // A rows (not pregathered)
      for (int item = first_item(); item < items; item = next_item(item)) {
        begin_item();
        const Work w = locate(item);
        dq.init(args, w.n0, w.expert, tid);
        if (!a_tma) loader.init(args, w.tile * BLOCK_M, w.n0, w.expert, tid, w.rows_valid);
        // Prime the raw ring RAW_STAGES - 1 k tiles deep (one cp.async group each), and the first scales.
#pragma unroll
        for (int j = 0; j < DQ::RAW_STAGES - 1; ++j) {
          if (j < local_tiles) dq.issue(raw0 + j * RAW_SLOT, kt_begin + j);
          sm80::cp_async_commit();
        }
        // Scales: set u % SCALE_SETS holds k tile u's, fetched SCALE_SETS - 1 tiles ahead (the loop
        // runs in unrolled rounds so that every set index is a compile-time register).
        constexpr int SETS = DQ::SCALE_SETS;
        unsigned sc[SETS][DQ::LOADS];
#pragma unroll
        for (int u = 0; u < SETS - 1; ++u)
          if (u < local_tiles) dq.fetch_scales(args, kt_begin + u, sc[u]);
        for (int i0 = 0; i0 < local_tiles; i0 += SETS) {
#pragma unroll
          for (int u = 0; u < SETS; ++u) {
            const int i = i0 + u;
            if (i >= local_tiles) break;
            // Set (u - 1) % SETS was k tile i - 1's, converted last iteration.
            if (i + SETS - 1 < local_tiles) dq.fetch_scales(args, kt_begin + i + SETS - 1, sc[(u + SETS - 1) % SETS]);
            const int slot = it % STAGES;
            const unsigned full = full0 + slot * 8;
            sm90::mbar_wait(empty0 + slot * 8, ((it / STAGES) & 1) ^ 1);  // a fresh slot passes at once
            if (a_tma) {
              if (tid == 0) {
                sm90::mbar_arrive_expect_tx(full, T::A_STAGE);
                load_a_box(slot, kt_begin + i, w.tile);
              }
            } else {
              loader.issue(args, smem_a + slot * T::A_STAGE, smem_b + slot * T::B_STAGE, kt_begin + i);
              sm90::cp_async_mbar_arrive(full);
            }
            // Refill: k tile i + RAW_STAGES - 1 into the raw slot tile i - 1 used (this thread has
            // read it); then tile i's group (RAW_STAGES - 1 groups back) has landed.
            const int ahead = i + DQ::RAW_STAGES - 1;
            if (ahead < local_tiles) dq.issue(raw0 + (ahead % DQ::RAW_STAGES) * RAW_SLOT, kt_begin + ahead);
            sm80::cp_async_commit();
            sm80::cp_async_wait<DQ::RAW_STAGES - 1>();
            dq.convert(raw0 + (i % DQ::RAW_STAGES) * RAW_SLOT, smem_b + slot * T::B_STAGE, sc[u]);
            sm90::fence_proxy_async();  // this thread's weight stores -> the async proxy (wgmma)
            sm90::mbar_arrive(full);
            ++it;
          }
        }
      }
    } else if (a_tma) {
      // Every copy is one bulk tensor copy: thread 0 produces alone.
      if (tid == 0)
        for (int item = first_item(); item < items; item = next_item(item)) {
          begin_item();
          const Work w = locate(item);
          for (int i = 0; i < local_tiles; ++i, ++it) {
            const int slot = it % STAGES;
            sm90::mbar_wait(empty0 + slot * 8, ((it / STAGES) & 1) ^ 1);  // a fresh slot passes at once
            sm90::mbar_arrive_expect_tx(full0 + slot * 8, T::A_STAGE + T::B_STAGE);
            load_a_box(slot, kt_begin + i, w.tile);
            load_weight_boxes(slot, kt_begin + i, w.n0, w.expert, w.multicast);
          }
        }
    } else {
      ChunkLoader<ROLE, ACT, QUANT, BLOCK_M, BLOCK_N, 128, true> loader;  // A rows only
      for (int item = first_item(); item < items; item = next_item(item)) {
        begin_item();
        const Work w = locate(item);
        loader.init(args, w.tile * BLOCK_M, w.n0, w.expert, tid, w.rows_valid);
        for (int i = 0; i < local_tiles; ++i, ++it) {
          const int slot = it % STAGES;
          sm90::mbar_wait(empty0 + slot * 8, ((it / STAGES) & 1) ^ 1);  // a fresh slot passes at once
          loader.issue(args, smem_a + slot * T::A_STAGE, smem_b + slot * T::B_STAGE, kt_begin + i);
          if (tid == 0) {
            sm90::mbar_arrive_expect_tx(full0 + slot * 8, T::B_STAGE);
            load_weight_boxes(slot, kt_begin + i, w.n0, w.expert, w.multicast);
          }
          sm90::cp_async_mbar_arrive(full0 + slot * 8);
        }
      }
    }
    sm80::cp_async_wait<0>();
  } else {  // consumer warpgroups
    if constexpr (MOVE_REGS) sm90::setmaxnreg_inc<CONSUMER_REGS>();
    // Group g (ping-pong) takes the CTA's items g, g + 2, ...; its thread gtid, warpgroup wg of
    // the tile (64 rows each).
    const int ctid = tid - PRODUCERS, lane = tid & 31, group = PINGPONG ? ctid / TILE_THREADS : 0;
    const int gtid = ctid - group * TILE_THREADS, cwarp = gtid >> 5, wg = cwarp / 4;
    s_slot += group * BLOCK_M;  // this group's row arrays (moe_wgmma_rows_held)
    s_arow += group * BLOCK_M;
    s_weight += group * BLOCK_M;
    const unsigned turn0 = full0 + 2 * STAGES * 8;  // [2] (ping-pong)
    float acc[T::G][1][T::NI][4];
    float* d = &acc[0][0][0][0];
    float part[PROMOTED ? CHUNK_ROWS / 2 : 1];  // fp8: one k tile's sums (of a chunk's weight rows)
    // Per-weight-row scales (fp8 channel / tensor; not with ping-pong, whose turn barriers are here).
    static_assert(!(PINGPONG && EPILOGUE_SCALED), "ping-pong groups would need column scales of their own");
    static_assert(!STAGED || moe_wgmma_staging_bytes(ROLE, BLOCK_M, BLOCK_N, STAGES, T::G == 2, true, QUANT) > 0,
                  "the staged tile fits beside the ring");
    static_assert(!(PINGPONG && STAGED), "ping-pong groups would need staging tiles of their own");
    int it = group * local_tiles;  // the ring's k tile sequence: the CTA's items in order, local_tiles each
    // Each item's row data is fetched one item ahead, off the critical path: consumer thread gtid <
    // BLOCK_M (TILE_THREADS = 2 BLOCK_M, or BLOCK_M with ping-pong) holds row gtid's routed slot and
    // router weight, and the tile's expert. The next tile's slot loads are issued before this tile's
    // k loop, the weights (which need the slot) after it. Fetched at tile start, these two dependent
    // round trips were the top stall of GEMM2s with few k tiles (DeepSeek-V3 TP8, K = 256: 4 per tile).
    static_assert(TILE_THREADS >= BLOCK_M, "a consumer thread per tile row");
    auto fetch_slot = [&](int item, int& expert) {
      if (item >= items) return -1;
      const Work w = locate(item);
      expert = w.expert;
      return gtid < BLOCK_M && w.rows_valid ? args.gather_index[w.tile * BLOCK_M + gtid] : -1;
    };
    // A slot this group is done with (its wgmmas have read it); multicast: the peer's producer
    // writes into it too, so one arrival per warp goes to the peer's barrier as well.
    auto release = [&](int slot) {
      sm90::mbar_arrive(empty0 + slot * 8);
      if constexpr (MULTICAST) {
        __syncwarp();
        if (lane == 0) sm90::mbar_arrive_cluster(empty0 + slot * 8, rank ^ 1);
      }
    };
    // The tile's bias columns, [G][BLOCK_N] by tile column, in s_col_scale's place (free where the
    // format has no epilogue scales; ping-pong groups would need one each): each consumer thread
    // loads its B_ROWS / TILE_THREADS (1 or 2) before the k loop and stores them after it, so the
    // loads' round trip hides under the loop and the epilogue reads shared memory.
    constexpr bool BIAS_STAGED = !EPILOGUE_SCALED && !PINGPONG;
    constexpr int BIAS_LOADS = (T::B_ROWS + TILE_THREADS - 1) / TILE_THREADS;
    float* s_bias = s_col_scale;
    const int stride = GROUPS * walkers;
    int consumed = 0;  // claimed items read (the work queue)
    int item = claimed ? queued_item(consumed++) : first + group * walkers;
    int expert_next = 0;
    int slot_next = fetch_slot(item, expert_next);
    float weight_next = moe_tile::router_weight(args, slot_next);
    for (int turn = 0; item < items; ++turn) {
      const int item_after = claimed ? queued_item(consumed++) : item + stride;
      const Work w = locate(item);
      const int n0 = w.n0, expert = expert_next, row0 = w.tile * BLOCK_M;
      sm90::named_barrier(1 + group, TILE_THREADS);  // the previous tile's epilogue is done with the row arrays
      if (gtid < BLOCK_M) {
        s_slot[gtid] = slot_next;
        s_arow[gtid] = moe_tile::a_row<ROLE>(args, slot_next, row0 + gtid);
        s_weight[gtid] = weight_next;
      }
      if constexpr (EPILOGUE_SCALED)
        column_scales<ACT, BLOCK_N, T::B_ROWS>(args, n0, expert, gtid, TILE_THREADS, s_col_scale);
      sm90::named_barrier(1 + group, TILE_THREADS);
      slot_next = fetch_slot(item_after, expert_next);
      float bias_part[BIAS_LOADS];
      if constexpr (BIAS_STAGED) {
        // Only the loaded values live across the k loop (the pointer is found again after it): a
        // register more or less decides whether three 64-row CTAs share an SM.
        if (const float* b = moe_tile::tile_bias<ROLE>(args, expert)) {
  #pragma unroll
          for (int r = 0; r < BIAS_LOADS; ++r) {
            const int at = gtid + r * TILE_THREADS, wrow = moe_tile::weight_row<ACT>(args, n0 + at % BLOCK_N, at / BLOCK_N);
            bias_part[r] = at < T::B_ROWS && wrow >= 0 ? b[wrow] : 0.f;
          }
        }
      }
  #pragma unroll
      for (int e = 0; e < T::G * T::NI * 4; ++e) d[e] = 0.f;
      // Ping-pong: group 1's item n follows group 0's item n, group 0's item n (n >= 1) group 1's
      // item n - 1: wait for the other group's turn-barrier phase of that item.
      if constexpr (PINGPONG)
        if (group == 1 || turn > 0) sm90::mbar_wait(turn0 + group * 8, (group == 1 ? turn : turn - 1) & 1);
      int held = -1;  // the slot whose wgmma may still run
      // Claimed items: warpgroup 1 of a 128-row tile whose rows 64.. are all padding (an expert's
      // last tile often ends in its first 64 rows; padding rows are a tile's last) only frees the
      // ring's slots, so that warpgroup 0's wgmmas have the tensor cores alone and the tile ends
      // sooner. Not with the fixed stride: there the CTAs with such tiles ran ahead of those
      // sharing their weight tiles in L2 (ncu, H200, Mixtral-8x7B M = 2048 GEMM1: 3.16 -> 5.78 GB
      // from DRAM, 1.48 -> 1.70 ms). The test is a warp vote and both loops count k tiles from
      // it0, advancing `it` after them: a ring position that depended on the branch is no longer
      // provably warp-uniform, and ptxas then builds every wgmma descriptor through R2UR.
      const bool idle = __all_sync(0xffffffffu, claimed && BLOCK_M == 128 && wg == 1 && s_slot[64] < 0);
      const int it0 = it;
      if (idle)
        for (int i = 0; i < local_tiles; ++i) {
          const int slot = (it0 + i) % STAGES;
          sm90::mbar_wait(full0 + slot * 8, ((it0 + i) / STAGES) & 1);
          release(slot);
        }
      else if constexpr (PROMOTED) {
        // The sums of each k tile join d apart (quant_promotes_k_tiles), block-scaled ones scaled
        // on the way: wait for this one, free its slot, promote. The other consumer warpgroup's
        // wgmmas keep the tensor cores busy meanwhile, for as long as this one's instructions
        // between its k tiles take: the ring position advances by a step, not by % STAGES, and
        // block scales' addresses are found once per tile. GEMM1 loads k tile i + 1's scales while
        // tile i's wgmmas run (its FMULs had waited on them); GEMM2, of short k loops, loads each k
        // tile's before its wait (a fetch ahead measured slower there, 815 -> 858 us, DeepSeek-V3
        // TP8 M = 8192, H100). WIDE GEMM1s keep the fetch ahead although it spills 4 bytes of the
        // unstaged 128 x 256-weight-row fp8_block tiles' consumers (224 registers): without it
        // (no spill) DeepSeek-V3 TP8 / DeepSeek-V3 M = 8192 ran 1640-1681 / 7821 -> 1668-1723 /
        // 7894-7908 us (H100, no DB, two rounds).
        constexpr bool AHEAD = BLOCK_SCALED && ROLE == kRoleGemm1;
        using Scales = BlockScales<T::G, BLOCK_N>;
        Scales scales;
        if constexpr (BLOCK_SCALED)
          scales.template init<ACT>(args, s_arow, wg * 64 + (cwarp % 4) * 16 + (lane >> 2), n0, expert);
        float a_sc[2], b_sc[Scales::SLOTS];
        if constexpr (AHEAD)
          if (local_tiles > 0) scales.load(args, kt_begin, a_sc, b_sc);
        int slot = it0 % STAGES, phase = (it0 / STAGES) & 1;
        for (int i = 0; i < local_tiles; ++i) {
          float a_next[2], b_next[Scales::SLOTS];
          if constexpr (AHEAD)  // the last k tile loads its own again (no branch, no read past the row)
            scales.load(args, kt_begin + min(i + 1, local_tiles - 1), a_next, b_next);
          else if constexpr (BLOCK_SCALED)
            scales.load(args, kt_begin + i, a_sc, b_sc);
          sm90::mbar_wait(full0 + slot * 8, phase);
          sm90::fence_proxy_async();  // the landed copies -> the async proxy (wgmma)
          sm90::fence();
          const unsigned long long desc_a = sm90::sw128_desc(smem_a + slot * T::A_STAGE + wg * 64 * kRowBytes);
          // Chunk c: weight rows c * CHUNK_ROWS .. of the slot (whole 1024-byte swizzle atoms).
#pragma unroll
          for (int c = 0; c < CHUNKS; ++c) {
            if (c > 0) sm90::fence();  // the promotion's reads of `part` before the wgmma that rewrites it
            mma_k_tile<DTYPE, QUANT, CHUNK_ROWS>(
                part, desc_a, sm90::sw128_desc(smem_b + slot * T::B_STAGE + c * CHUNK_ROWS * kRowBytes), 0);
            sm90::commit();
            sm90::wait<0>();
            if (c == CHUNKS - 1) release(slot);
            if constexpr (BLOCK_SCALED) promote_block<T::G, BLOCK_N, CHUNK_ROWS>(d, part, a_sc, b_sc, c);
            else promote_sum<CHUNK_ROWS / 2>(d + c * CHUNK_ROWS / 2, part);
          }
          if constexpr (AHEAD) {
#pragma unroll
            for (int h = 0; h < 2; ++h) a_sc[h] = a_next[h];
#pragma unroll
            for (int g = 0; g < Scales::SLOTS; ++g) b_sc[g] = b_next[g];
          }
          if (++slot == STAGES) {
            slot = 0;
            phase ^= 1;
          }
        }
      } else
        for (int i = 0; i < local_tiles; ++i) {
          const int k = it0 + i;
          const int slot = k % STAGES;
          sm90::mbar_wait(full0 + slot * 8, (k / STAGES) & 1);
          sm90::fence_proxy_async();  // the landed copies -> the async proxy (wgmma)
          sm90::fence();
          const unsigned long long desc_a = sm90::sw128_desc(smem_a + slot * T::A_STAGE + wg * 64 * kRowBytes);
#pragma unroll
          for (int c = 0; c < CHUNKS; ++c)  // weight rows c * CHUNK_ROWS .., accumulators d + c * CHUNK_ROWS / 2
            mma_k_tile<DTYPE, QUANT, CHUNK_ROWS>(d + c * CHUNK_ROWS / 2, desc_a,
                                                 sm90::sw128_desc(smem_b + slot * T::B_STAGE + c * CHUNK_ROWS * kRowBytes));
          sm90::commit();
          sm90::wait<1>();
          if (held >= 0) release(held);
          held = slot;
        }
      it = it0 + local_tiles;
      // Ping-pong: every wgmma of this item is issued and every `full` wait of its k tiles passed:
      // the other group's k loop may start (its first tile's fill is then at most one phase ahead).
      if constexpr (PINGPONG) sm90::mbar_arrive(turn0 + (1 - group) * 8);
      it += (GROUPS - 1) * local_tiles;  // the other group's item
      sm90::wait<0>();
      if (held >= 0) release(held);
      weight_next = moe_tile::router_weight(args, slot_next);  // lands during the epilogue
  #pragma unroll
      for (int e = 0; e < T::G * T::NI * 4; ++e) sm90::fence_operand(d[e]);
      // The row arrays' barrier at the loop's top keeps the tile before's epilogue from reading these.
      const float* bias = BIAS_STAGED ? moe_tile::tile_bias<ROLE>(args, expert) : nullptr;
      if (bias) {
  #pragma unroll
        for (int r = 0; r < BIAS_LOADS; ++r)
          if (gtid + r * TILE_THREADS < T::B_ROWS) s_bias[gtid + r * TILE_THREADS] = bias_part[r];
        sm90::named_barrier(1 + group, TILE_THREADS);
      }
      if constexpr (STAGED) {
        // Warp w stages and copies out its own tile rows 16 w .. 16 w + 15 (the rows its fragments
        // hold; lane l < 16 copies row 16 w + l), so a warp barrier orders them. Copies by one
        // warpgroup's threads, a row each between two CTA barriers, kept the other warpgroup
        // waiting at those barriers (13% of the stall samples of DeepSeek-V3 TP8's GEMM2, H200).
        using Out = StagedTile<ROLE, DTYPE, BLOCK_N>;
        const int copy_row = cwarp * 16 + lane;
        static_assert(TILE_THREADS / 32 * 16 == BLOCK_M, "16 rows a warp");
        const bool bulk = Out::bulk_rows(local_tiles);  // (uniform)
        // Bulk copies: this warp's rows of the tile before have left (their copies were issued a k
        // loop ago: the wait is normally over at once).
        if (bulk && lane < 16) sm90::bulk_wait_read();
        __syncwarp();
        const Out out{s_out, n0};
        moe_store::store_fragments_tile_bias<BIAS_STAGED, ROLE, DTYPE, ACT, QUANT, BLOCK_N>(
            args, acc, cwarp * 16, 0, lane, n0, expert, bias != nullptr, s_bias, s_slot, s_arow, s_weight, s_col_scale,
            out);
        if (bulk) {
          sm90::fence_proxy_async();  // the staged rows -> the copy engine
          __syncwarp();
          // Left in flight: the copies overlap the next tile's k loop.
          if (lane < 16 && s_slot[copy_row] >= 0) out.store_row(args, row0, copy_row, s_slot[copy_row]);
        } else {
          __syncwarp();
          out.copy_rows(args, row0, cwarp * 16, lane, s_slot);
        }
      } else {
        moe_store::store_fragments_tile_bias<BIAS_STAGED, ROLE, DTYPE, ACT, QUANT, BLOCK_N>(
            args, acc, wg * 64 + (cwarp % 4) * 16, 0, lane, n0, expert, bias != nullptr, s_bias, s_slot, s_arow, s_weight,
            s_col_scale, moe_store::DirectSink<ROLE, DTYPE>{args, row0});
      }
      item = item_after;
    }
    if constexpr (STAGED)
      if (lane < 16) sm90::bulk_wait_read();  // bulk copies' sources must outlive the CTA's shared memory
  }
  // Multicast: neither CTA leaves while the other may still copy into its ring or arrive on its barriers.
  if constexpr (MULTICAST) sm90::cluster_sync();
}
#endif

}  // namespace moe_wgmma_detail
}  // namespace moejit
