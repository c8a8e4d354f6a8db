// The kernel cache: hits, validation and repair, unwritable locations, LRU pruning, and many
// processes racing on an empty cache.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <fstream>

#include "common/files.h"
#include "jit/families.h"
#include "support/test_support.h"

using namespace moejit;
namespace fs = std::filesystem;

namespace {
KernelSpec spec6() { return make_spec("routing_sort", "sm_90a", {{"top_k", "6"}}); }

fs::path entry_dir(Runtime& rt, const std::string& key) { return rt.cache().entries_dir() / key.substr(0, 2) / key; }
}  // namespace

TEST_CASE("miss, then hit in memory, then hit on disk from a new runtime") {
  test::ScratchDir dir("hit");
  std::string key, cubin;
  {
    Runtime rt(test::test_options(dir.path()));
    auto first = rt.compile(spec6());
    CHECK(!first->cache_hit);
    auto second = rt.compile(spec6());
    CHECK(second->cache_hit);
    CHECK(rt.cache().stats().misses == 1);
    CHECK(rt.cache().stats().memory_hits == 1);
    CHECK(rt.cache().stats().compiles == 1);
    key = first->key;
    cubin = first->entry->cubin;
    for (const char* f : {"kernel.cu", "kernel.ptx", "kernel.cubin", "manifest.json"})
      CHECK(fs::exists(entry_dir(rt, key) / f));
  }
  Runtime rt(test::test_options(dir.path()));
  auto again = rt.compile(spec6());
  CHECK(again->cache_hit);
  CHECK(again->entry->cubin == cubin);
  CHECK(rt.cache().stats().disk_hits == 1);
  auto manifest = nlohmann::json::parse(read_file(entry_dir(rt, key) / "manifest.json"));
  CHECK(manifest["spec"]["params"]["padded"] == 256);
  CHECK(manifest["entries"].size() == 3);
  CHECK(manifest.contains("nvrtc_version"));
  CHECK(manifest["entries"][0]["resources"]["registers"].get<int>() > 0);
}

TEST_CASE("a damaged entry is a miss and is rebuilt") {
  struct Damage {
    const char* name;
    void (*apply)(const fs::path&);
  };
  const Damage damages[] = {
      {"truncated cubin", [](const fs::path& d) { fs::resize_file(d / "kernel.cubin", 100); }},
      {"garbage manifest", [](const fs::path& d) { write_file_synced(d / "manifest.json", "{not json"); }},
      {"missing ptx", [](const fs::path& d) { fs::remove(d / "kernel.ptx"); }},
      {"flipped cubin byte", [](const fs::path& d) {
         std::string c = read_file(d / "kernel.cubin");
         c[c.size() / 2] ^= 0x5a;
         write_file_synced(d / "kernel.cubin", c);
       }},
  };
  for (const auto& damage : damages) {
    INFO(damage.name);
    test::ScratchDir dir("damage");
    std::string key, cubin;
    {
      Runtime rt(test::test_options(dir.path()));
      auto k = rt.compile(spec6());
      key = k->key;
      cubin = k->entry->cubin;
      damage.apply(entry_dir(rt, key));
    }
    Runtime rt(test::test_options(dir.path()));
    auto rebuilt = rt.compile(spec6());
    CHECK(!rebuilt->cache_hit);
    CHECK(rt.cache().stats().invalid_entries == 1);
    CHECK(rebuilt->entry->cubin == cubin);
    auto entries = rt.cache().list();
    REQUIRE(entries.size() == 1);
    CHECK(entries[0].valid);
  }
}

// A cubin rebuilt from the same spec is the same bytes, in every family: NVRTC names a header's
// namespace-scope constexpr variable per compile unless it is inline (or an enumerator), which made
// the moe kernels' PTX and cubins differ between builds.
TEST_CASE("every kernel family builds the same cubin twice") {
  const std::map<std::string, std::map<std::string, std::string>> params = {
      {"routing_topk", {{"num_experts", "64"}, {"top_k", "6"}}},
      {"routing_fused", {{"num_experts", "64"}, {"top_k", "6"}}},
      {"routing_sort", {{"top_k", "6"}}},
      {"moe_reduce", {{"top_k", "6"}}},
      {"moe_decode_gemv", {{"hidden", "1024"}, {"intermediate", "512"}, {"num_experts", "64"}, {"top_k", "6"}}},
  };
  std::vector<KernelSpec> specs;
  for (const auto& f : families()) {
    const auto p = params.find(f.name);
    specs.push_back(make_spec(f.name, "sm_90a", p == params.end() ? std::map<std::string, std::string>{} : p->second));
  }
  REQUIRE(specs.size() >= 11);  // every family
  specs.push_back(make_spec("moe_gemm_wgmma", "sm_90a",
                            {{"role", "gemm1"}, {"activation", "swigluoai"}, {"quant", "mxfp4"}, {"block_m", "128"},
                             {"block_n", "64"}, {"stages", "4"}, {"persistent", "1"}}));
  std::vector<std::string> first;
  {
    Runtime rt(test::test_options(""));
    for (const auto& s : specs) first.push_back(rt.compile(s)->entry->cubin);
  }
  Runtime rt(test::test_options(""));
  for (std::size_t i = 0; i < specs.size(); ++i) {
    INFO(specs[i].family);
    CHECK(rt.compile(specs[i])->entry->cubin == first[i]);
  }
}

TEST_CASE("an unwritable cache location degrades to memory") {
  test::ScratchDir dir("unwritable");
  // A regular file where a directory must go: unwritable even for root (chmod is not).
  write_file_synced(dir.path() / "file", "x");
  Runtime rt(test::test_options(dir.path() / "file" / "cache"));
  CHECK(!rt.cache().on_disk());
  auto first = rt.compile(spec6());
  CHECK(!first->cache_hit);
  CHECK(rt.compile(spec6())->cache_hit);
}

TEST_CASE("prune evicts least recently used entries to the size cap; clear empties") {
  test::ScratchDir dir("prune");
  Runtime rt(test::test_options(dir.path()));
  std::vector<std::string> keys;
  for (const char* k : {"2", "3", "4"}) keys.push_back(rt.compile(make_spec("routing_sort", "sm_80", {{"top_k", k}}))->key);
  // Make the first entry the most recently used.
  auto now = fs::file_time_type::clock::now();
  fs::last_write_time(entry_dir(rt, keys[0]), now);
  fs::last_write_time(entry_dir(rt, keys[1]), now - std::chrono::hours(2));
  fs::last_write_time(entry_dir(rt, keys[2]), now - std::chrono::hours(1));
  auto entries = rt.cache().list();
  REQUIRE(entries.size() == 3);
  std::uint64_t one = entries[0].bytes;
  CHECK(rt.cache().prune(one + one / 2) == 2);
  auto left = rt.cache().list();
  REQUIRE(left.size() == 1);
  CHECK(left[0].key == keys[0]);
  rt.cache().clear();
  CHECK(rt.cache().list().empty());
}

TEST_CASE("8 processes compiling the same specs into an empty cache all succeed; one entry per key") {
  test::ScratchDir dir("race");
  test::ScratchDir specs_dir("race-specs");
  nlohmann::json specs = nlohmann::json::array();
  for (const char* k : {"3", "5", "6", "7"})
    specs.push_back(make_spec("routing_sort", "sm_90a", {{"top_k", k}}).to_json());
  write_file_synced(specs_dir.path() / "specs.json", specs.dump());
  std::string command = "pids=''; ";
  for (int i = 0; i < 8; ++i)
    command += fmt::format("MOEJIT_COMPILE_THREADS=1 '{}' compile --spec '{}' --cache-dir '{}' > '{}/out{}' 2>&1 & pids=\"$pids $!\"; ",
                           MOEJIT_CLI_PATH, (specs_dir.path() / "specs.json").string(), dir.path().string(),
                           specs_dir.path().string(), i);
  command += "status=0; for p in $pids; do wait $p || status=1; done; exit $status";
  std::string output;
  int status = test::run_command(command, &output);
  for (int i = 0; i < 8; ++i) {
    std::string log;
    try_read_file(specs_dir.path() / fmt::format("out{}", i), log);
    INFO("process " << i << ": " << log);
    CHECK(log.find("4 kernel sets ready") != std::string::npos);
  }
  CHECK(status == 0);
  Runtime rt(test::test_options(dir.path()));
  auto entries = rt.cache().list();
  CHECK(entries.size() == 4);
  for (const auto& e : entries) CHECK(e.valid);
  // No temporary directories are left behind.
  std::size_t leftovers = 0;
  for (auto it = fs::directory_iterator(dir.path() / "tmp"); it != fs::directory_iterator(); ++it) ++leftovers;
  CHECK(leftovers == 0);
}
