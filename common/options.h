// Options: one typed struct, filled from the environment once (prefix MOEJIT_), then passed around
// explicitly. Nothing else in the library reads the environment.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "common/log.h"

namespace moejit {

struct Options {
  // Disk cache root; empty = in-memory only. Default: $MOEJIT_CACHE_DIR, else $XDG_CACHE_HOME/moejit,
  // else ~/.cache/moejit.
  std::filesystem::path cache_dir;
  bool disk_cache = true;                            // MOEJIT_CACHE=0 disables the disk cache
  std::uint64_t cache_max_bytes = 4ull << 30;        // MOEJIT_CACHE_MAX_MB; LRU eviction above it
  std::filesystem::path template_dir;                // MOEJIT_TEMPLATE_DIR: use these templates
  std::filesystem::path cuda_home;                   // MOEJIT_CUDA_HOME: where CUDA headers live
  LogLevel log_level = LogLevel::Warn;               // MOEJIT_LOG
  int compile_threads = 0;                           // MOEJIT_COMPILE_THREADS; 0 = hardware threads
  bool save_failed_sources = true;                   // failing sources go to <cache>/failed/
  bool tune_on_first_use = false;                    // MOEJIT_TUNE=1
  bool use_tuned_dbs = true;                         // MOEJIT_TUNED_DBS=0: the heuristic's configs only
  // MOEJIT_WORK_QUEUE=1 / 0: the persistent wgmma GEMMs always / never claim their items from a
  // work queue (MoeGemmArgs::work_counter); unset (-1): as the tile config says (GemmTile::work_queue,
  // from a tuned DB), else those of layers with quantized weights and 128-row tiles do and the others
  // walk the fixed stride (work_queue_by_default; docs/performance.md, twentieth session).
  int work_queue = -1;
  // MOEJIT_TILE_HANDOVER=1 / 0: the mma.sync swap-AB decode pair hands GEMM1's rows to GEMM2 per
  // row tile (MoeGemmArgs::tile_wait) wherever it can / never; unset (-1): where GEMM1's grid is
  // more than one wave (docs/performance.md, thirty-seventh session).
  int tile_handover = -1;
  // MOEJIT_TUNED_DB: the user's tuned-config DB (read, and written by tuning); default
  // <cache_dir>/tuned/<device>.json. Every *.json in <cache_dir>/tuned/ is read too.
  std::filesystem::path tuned_db;

  // Reads MOEJIT_* variables; a malformed value is an Error(Validate) naming the variable.
  static Options from_env();
};

// Parsers shared with the CLI; each throws Error(Validate) naming `what` on bad input.
std::int64_t parse_int(const std::string& text, const std::string& what);
bool parse_bool(const std::string& text, const std::string& what);

}  // namespace moejit
