// moejit cache: list, verify, prune, clear and report the kernel cache.
#include <fmt/format.h>

#include <chrono>

#include "common/options.h"
#include "tools/cli_util.h"

namespace moejit::cli {

namespace {
constexpr const char* kHelp = R"(usage: moejit cache <ls|verify|prune|clear|stats> [options]

  ls                      one line per entry: key, family, arch, size, last use, validity
  verify [--fix]          validate every entry (manifest, sizes, hashes); --fix removes bad ones.
                          Exit 2 when bad entries remain.
  prune --max-mb N        evict least recently used entries until the cache is at most N MiB
  clear                   remove every entry
  stats                   entries, bytes, and hit/miss/compile counters of all processes
  --cache-dir DIR         the cache (default $MOEJIT_CACHE_DIR, $XDG_CACHE_HOME/moejit, ~/.cache/moejit)
)";

std::string age(std::filesystem::file_time_type t) {
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(std::filesystem::file_time_type::clock::now() - t).count();
  if (seconds < 120) return fmt::format("{}s ago", seconds);
  if (seconds < 7200) return fmt::format("{}m ago", seconds / 60);
  if (seconds < 172800) return fmt::format("{}h ago", seconds / 3600);
  return fmt::format("{}d ago", seconds / 86400);
}
}  // namespace

int cmd_cache(const std::vector<std::string>& argv) {
  Args args = parse_args(argv, {"cache-dir", "max-mb"}, {"help", "fix"});
  if (args.has("help")) {
    fmt::print("{}", kHelp);
    return kExitOk;
  }
  if (args.positional.size() != 1) throw UsageError("expected one of: ls, verify, prune, clear, stats");
  const std::string verb = args.positional[0];
  Options options = options_from(args);
  if (options.cache_dir.empty()) throw UsageError("no cache directory: set MOEJIT_CACHE_DIR or --cache-dir");
  KernelCache cache(options.cache_dir, options.cache_max_bytes);
  if (!cache.on_disk()) {
    fmt::print(stderr, "moejit cache: {} is not a usable cache directory\n", options.cache_dir.string());
    return kExitFailure;
  }

  if (verb == "ls") {
    for (const auto& e : cache.list()) {
      std::string what = "?";
      if (e.valid) what = e.manifest["spec"].value("family", "?") + " " + e.manifest.value("arch", "?");
      fmt::print("{}  {:<24} {:>9} B  {:>8}  {}\n", e.key, what, e.bytes, age(e.last_used),
                 e.valid ? "ok" : "INVALID: " + e.problem);
    }
    return kExitOk;
  }
  if (verb == "verify") {
    std::size_t bad = 0, total = 0;
    for (const auto& e : cache.list()) {
      ++total;
      if (!e.valid) {
        ++bad;
        fmt::print("invalid {}: {}\n", e.key, e.problem);
      }
    }
    std::size_t removed = args.has("fix") ? cache.remove_invalid() : 0;
    fmt::print("{} entries, {} invalid{}\n", total, bad, args.has("fix") ? fmt::format(", {} removed", removed) : "");
    return bad > removed ? kExitFailure : kExitOk;
  }
  if (verb == "prune") {
    if (!args.has("max-mb")) throw UsageError("prune needs --max-mb N");
    auto mb = parse_int(args.get("max-mb"), "--max-mb");
    if (mb < 0) throw UsageError("--max-mb must be >= 0");
    std::size_t n = cache.prune(static_cast<std::uint64_t>(mb) << 20);
    fmt::print("evicted {} entries\n", n);
    return kExitOk;
  }
  if (verb == "clear") {
    std::size_t n = cache.list().size();
    cache.clear();
    fmt::print("removed {} entries from {}\n", n, cache.root().string());
    return kExitOk;
  }
  if (verb == "stats") {
    std::uint64_t bytes = 0;
    std::size_t valid = 0, invalid = 0;
    double compile_seconds = 0;
    std::map<std::string, int> per_family;
    for (const auto& e : cache.list()) {
      bytes += e.bytes;
      if (!e.valid) { ++invalid; continue; }
      ++valid;
      compile_seconds += e.manifest.value("compile_seconds", 0.0);
      per_family[e.manifest["spec"].value("family", "?") + " " + e.manifest.value("arch", "?")]++;
    }
    fmt::print("cache:    {}\nentries:  {} valid, {} invalid, {} bytes (cap {} MiB)\n", cache.root().string(), valid,
               invalid, bytes, options.cache_max_bytes >> 20);
    fmt::print("compile seconds stored in entries: {:.2f}\n", compile_seconds);
    for (const auto& [what, n] : per_family) fmt::print("  {:<28} {}\n", what, n);
    fmt::print("counters of earlier processes: {}\n", cache.persisted_stats().to_json().dump());
    return kExitOk;
  }
  throw UsageError("unknown cache command '" + verb + "'");
}

}  // namespace moejit::cli
