// NVRTC compiles every template family for every arch we target; failures carry log, options, source.
#include <doctest/doctest.h>

#include <fstream>

#include "common/error.h"
#include "common/files.h"
#include "jit/families.h"
#include "support/test_support.h"

using namespace moejit;

namespace {
// Every specialization the GPU tests and the demo launch, plus the edges of the parameter space.
std::vector<KernelSpec> specs_for(const std::string& arch) {
  std::vector<KernelSpec> specs;
  for (int k : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 16, 32})
    specs.push_back(make_spec("routing_sort", arch, {{"top_k", std::to_string(k)}}));
  specs.push_back(make_spec("routing_sort", arch, {{"top_k", "1"}, {"tokens_per_cta", "1"}}));
  specs.push_back(make_spec("routing_sort", arch, {{"top_k", "3"}, {"tokens_per_cta", "100"}}));  // 300 keys -> 512
  return specs;
}

// routing_topk: every scoring rule and dtype, grouped, the widest E and top_k.
std::vector<KernelSpec> topk_specs_for(const std::string& arch) {
  std::vector<KernelSpec> specs;
  for (const char* scoring : {"softmax", "sigmoid", "softmax_after_topk"})
    for (const char* dtype : {"f32", "bf16", "f16"})
      specs.push_back(make_spec("routing_topk", arch, {{"top_k", "6"}, {"num_experts", "64"}, {"scoring", scoring},
                                                       {"logit_dtype", dtype}}));
  specs.push_back(make_spec("routing_topk", arch, {{"top_k", "8"}, {"num_experts", "256"}, {"scoring", "sigmoid"},
                                                   {"n_group", "8"}, {"topk_group", "4"}}));
  specs.push_back(make_spec("routing_topk", arch, {{"top_k", "32"}, {"num_experts", "512"}, {"renormalize", "false"}}));
  specs.push_back(make_spec("routing_topk", arch, {{"top_k", "1"}, {"num_experts", "1"}}));
  return specs;
}
// Copies the embedded templates into `dir` (a MOEJIT_TEMPLATE_DIR tree), appending `extra` to `target`.
void write_template_tree(const std::filesystem::path& dir, const std::string& target, const std::string& extra) {
  TemplateStore embedded;
  for (const auto& path : embedded.paths()) {
    auto file = dir / path;
    std::filesystem::create_directories(file.parent_path());
    write_file_synced(file, embedded.text(path) + (path == target ? extra : ""));
  }
}
}  // namespace

TEST_CASE("NVRTC compiles every routing_sort specialization for sm_80, sm_90a and sm_100a") {
  test::ScratchDir dir("nvrtc");
  Runtime rt(test::test_options(dir.path()));
  for (const char* arch : {"sm_80", "sm_90a", "sm_100a"}) {
    auto compiled = rt.compile_all(specs_for(arch));
    for (const auto& k : compiled) {
      INFO(k->spec.to_string());
      CHECK(!k->entry->cubin.empty());
      CHECK(k->entry->ptx.find(std::string(".target ") + arch) != std::string::npos);
      REQUIRE(k->entries.size() == 3);
      for (const auto& e : k->entries) {
        CHECK(e.lowered_name.rfind("_Z", 0) == 0);
        CHECK(e.resources.registers > 0);
        CHECK(e.resources.spill_store_bytes == 0);
      }
    }
  }
}

TEST_CASE("NVRTC compiles every routing_topk specialization for sm_80, sm_90a and sm_100a") {
  test::ScratchDir dir("nvrtc-topk");
  Runtime rt(test::test_options(dir.path()));
  for (const char* arch : {"sm_80", "sm_90a", "sm_100a"}) {
    for (const auto& k : rt.compile_all(topk_specs_for(arch))) {
      INFO(k->spec.to_string());
      CHECK(k->entry->ptx.find(std::string(".target ") + arch) != std::string::npos);
      REQUIRE(k->entries.size() == 1);
      CHECK(k->entries[0].resources.registers > 0);
      CHECK(k->entries[0].resources.stack_bytes == 0);  // register arrays stayed in registers
    }
  }
}

TEST_CASE("a failing compile throws Error(Compile) with the NVRTC log, the options and the saved source") {
  test::ScratchDir cache("nvrtc-fail");
  test::ScratchDir templates("broken-templates");
  // A development template tree (MOEJIT_TEMPLATE_DIR) whose routing_sort has a type error.
  write_template_tree(templates.path(), "routing/routing_sort.cuh",
                      "\nnamespace moejit { __device__ int broken = undefined_symbol_x; }\n");
  Options o = test::test_options(cache.path());
  o.template_dir = templates.path();
  Runtime rt(o);
  try {
    rt.compile(make_spec("routing_sort", "sm_90a", {{"top_k", "6"}}));
    FAIL("expected a compile error");
  } catch (const Error& e) {
    CHECK(e.phase() == Phase::Compile);
    CHECK(e.nvrtc_log().find("undefined_symbol_x") != std::string::npos);
    CHECK(!e.options().empty());
    REQUIRE(!e.saved_source_path().empty());
    CHECK(read_file(e.saved_source_path()).find("routing_sort.cuh") != std::string::npos);
  }
  // Nothing was published for the failed key.
  CHECK(rt.cache().list().empty());
}

TEST_CASE("editing a template changes the cache key") {
  test::ScratchDir cache("tpl-edit");
  test::ScratchDir templates("edited-templates");
  write_template_tree(templates.path(), "common/block_scan.cuh", "// edited\n");
  Runtime plain(test::test_options(cache.path()));
  Options o = test::test_options(cache.path());
  o.template_dir = templates.path();
  Runtime edited(o);
  auto spec = make_spec("routing_sort", "sm_90a", {{"top_k", "6"}});
  CHECK(plain.cache_key(plain.render(spec)) != edited.cache_key(edited.render(spec)));
}

TEST_CASE("an arch NVRTC does not know is a clear validation error") {
  test::ScratchDir cache("bad-arch");
  Runtime rt(test::test_options(cache.path()));
  try {
    rt.compile(make_spec("routing_sort", "sm_13", {{"top_k", "2"}}));
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.phase() == Phase::Validate);
    CHECK(std::string(e.what()).find("not supported by NVRTC") != std::string::npos);
  }
}
