// KernelSpec completion, validation, JSON round trip, rendering and the golden cache key.
#include <doctest/doctest.h>

#include "cache/cache_key.h"
#include "common/error.h"
#include "jit/families.h"
#include "jit/source_render.h"
#include "templates/moe/moe_decode_args.cuh"
#include "support/test_support.h"

using namespace moejit;

TEST_CASE("routing_sort: PADDED is the next power of two of tokens_per_cta * top_k, for every top_k") {
  for (int k = 1; k <= 32; ++k) {
    KernelSpec s = make_spec("routing_sort", "sm_90a", {{"top_k", std::to_string(k)}});
    const std::int64_t block = 32 * k;
    const std::int64_t padded = s.get_int("padded");
    CHECK(padded >= block);
    CHECK((padded & (padded - 1)) == 0);
    CHECK(padded / 2 < block);
  }
  CHECK(make_spec("routing_sort", "sm_90a", {{"top_k", "6"}}).get_int("padded") == 256);
  CHECK(make_spec("routing_sort", "sm_90a", {{"top_k", "3"}, {"tokens_per_cta", "5"}}).get_int("padded") == 16);
}

TEST_CASE("spec validation names the problem") {
  auto fails_with = [](auto fn, const std::string& text) {
    try {
      fn();
      FAIL("expected an error containing: " << text);
    } catch (const Error& e) {
      CHECK(e.phase() == Phase::Validate);
      INFO(e.what());
      CHECK(std::string(e.what()).find(text) != std::string::npos);
    }
  };
  fails_with([] { make_spec("routing_sort", "sm_90a", {}); }, "'top_k' is required");
  fails_with([] { make_spec("routing_sort", "sm_90a", {{"top_k", "33"}}); }, "out of range");
  fails_with([] { make_spec("routing_sort", "sm_90a", {{"top_k", "six"}}); }, "not an integer");
  fails_with([] { make_spec("routing_sort", "sm_90a", {{"top_k", "6"}, {"colour", "red"}}); }, "unknown parameter 'colour'");
  fails_with([] { make_spec("routing_sort", "sm_90a", {{"top_k", "32"}, {"tokens_per_cta", "512"}}); }, "keys per CTA");
  fails_with([] { make_spec("routing_sort", "hopper", {{"top_k", "6"}}); }, "arch 'hopper'");
  fails_with([] { make_spec("gemm_of_dreams", "sm_90a", {}); }, "unknown kernel family");
  fails_with([] { make_spec("routing_sort", "sm_90a", {{"top_k", "6"}, {"padded", "192"}}); }, "derived parameter padded");
}

TEST_CASE("spec JSON round trip") {
  KernelSpec s = make_spec("routing_sort", "sm_80", {{"top_k", "5"}, {"tokens_per_cta", "16"}});
  KernelSpec back = complete_spec(KernelSpec::from_json(nlohmann::json::parse(s.to_json().dump())));
  CHECK(back == s);
  CHECK_THROWS_AS(KernelSpec::from_json(nlohmann::json::parse(R"({"arch":"sm_80"})")), Error);
  CHECK_THROWS_AS(KernelSpec::from_json(nlohmann::json::parse(R"({"family":"routing_sort","params":{"top_k":[1]}})")),
                  Error);
}

TEST_CASE("rendered source: one include, one explicit instantiation per entry, named template args") {
  TemplateStore store;
  RenderedKernel r = render_kernel(make_spec("routing_sort", "sm_90a", {{"top_k", "6"}}), store);
  CHECK(r.source.find("#include \"routing/routing_sort.cuh\"") != std::string::npos);
  CHECK(r.source.find("/*PADDED=*/256") != std::string::npos);
  CHECK(r.entries.size() == 3);
  CHECK(r.entries[0].name_expression == "moejit::routing_count_kernel<6, 32, 256, 128>");
  CHECK(r.source.find("{") == r.source.find("{\"arch\""));  // the only brace is the spec JSON comment
  // Entries of one kernel template that differ in trailing arguments (EntryPoint::extra_args).
  RenderedKernel g = render_kernel(make_spec("moe_decode_gemv", "sm_90a",
                                             {{"top_k", "8"}, {"hidden", "7168"}, {"intermediate", "256"},
                                              {"num_experts", "256"}, {"quant", "fp8_block"}}),
                                   store);
  // (DeepSeek-V3 TP8 fp8_block: also the SPAN entries, moe_decode_gemv_span_wanted.)
  REQUIRE(g.entries.size() == 6);
  CHECK(g.entries[1].name == "gemv2");
  CHECK(g.entries[2].name == "gemv2_many");
  CHECK(g.entries[1].name_expression.rfind("moejit::moe_decode_gemv2_kernel<", 0) == 0);
  CHECK(g.entries[1].name_expression.substr(g.entries[1].name_expression.size() - 5) == ", 10>");
  CHECK(g.entries[2].name_expression.substr(g.entries[2].name_expression.size() - 4) == ", 8>");
  CHECK(g.source.find("/*LOGIT_DTYPE=*/moejit::kLogitBF16, 8>") != std::string::npos);
  CHECK(g.entries[3].name == "gemv1_span");
  CHECK(g.entries[3].name_expression.substr(g.entries[3].name_expression.size() - 7) == ", true>");
  CHECK(g.entries[4].name == "gemv2_span");
  CHECK(g.entries[4].name_expression.substr(g.entries[4].name_expression.size() - 11) == ", 10, true>");
  CHECK(g.entries[5].name == "gemv2_many_span");
  CHECK(g.entries[5].name_expression.substr(g.entries[5].name_expression.size() - 10) == ", 8, true>");
  // An entry a spec does not want (EntryPoint::wanted) is not instantiated: without split gemv2
  // items (bf16 8 x 768: 768 chunks an item) gemv2_many would be gemv2's code again.
  RenderedKernel b = render_kernel(make_spec("moe_decode_gemv", "sm_90a",
                                             {{"top_k", "8"}, {"hidden", "2048"}, {"intermediate", "768"},
                                              {"num_experts", "128"}}),
                                   store);
  REQUIRE(b.entries.size() == 2);
  CHECK(b.entries[0].name == "gemv1");
  CHECK(b.entries[1].name == "gemv2");
  CHECK(b.source.find("gemv2_many") == std::string::npos);
  CHECK(b.source.find("moe_decode_gemv2_kernel<") != std::string::npos);
  CHECK_FALSE(moe_decode_gemv2_splits(kQuantNone, 8, 768));
  CHECK(moe_decode_gemv2_splits(kQuantFp8Block, 8, 256));  // DeepSeek-V3 TP8: 128 chunks an item
}

TEST_CASE("golden cache key: any change to the key function is deliberate") {
  CacheKeyInputs in;
  in.source = "#include \"routing/routing_sort.cuh\"\n";
  in.templates = {{"routing/routing_sort.cuh", "00ff"}, {"common/bitonic_sort.cuh", "11ee"}};
  in.options = {"--gpu-architecture=sm_90a", "-std=c++20"};
  in.nvrtc_version = "13.0";
  in.cuda_headers_version = 13000;
  in.arch = "sm_90a";
  in.moejit_version = "0.1.0";
  in.schema = 1;
  const std::string golden = compute_cache_key(in);
  MESSAGE("golden key: " << golden);
  CHECK(golden == "0ab1ceb7a5cc3d5f0be91c123abc7b116623feed25eacb3b17e51489d9ad16c9");
  // Every input matters; template order does not.
  auto changed = [&](auto mutate) {
    CacheKeyInputs c = in;
    mutate(c);
    return compute_cache_key(c) != golden;
  };
  CHECK(changed([](auto& c) { c.source += " "; }));
  CHECK(changed([](auto& c) { c.templates[0].second = "00fe"; }));
  CHECK(changed([](auto& c) { c.options.push_back("-G"); }));
  CHECK(changed([](auto& c) { c.nvrtc_version = "13.1"; }));
  CHECK(changed([](auto& c) { c.cuda_headers_version = 13010; }));
  CHECK(changed([](auto& c) { c.arch = "sm_90"; }));
  CHECK(changed([](auto& c) { c.moejit_version = "0.1.1"; }));
  CHECK(changed([](auto& c) { c.schema = 2; }));
  CHECK(!changed([](auto& c) { std::swap(c.templates[0], c.templates[1]); }));
}

TEST_CASE("cache keys of real specs differ by arch and by parameters, and are stable") {
  test::ScratchDir dir("keys");
  Runtime rt(test::test_options(dir.path()));
  auto key = [&](const char* arch, const char* k) { return rt.cache_key(rt.render(make_spec("routing_sort", arch, {{"top_k", k}}))); };
  CHECK(key("sm_90a", "6") == key("sm_90a", "6"));
  CHECK(key("sm_90a", "6") != key("sm_90", "6"));
  CHECK(key("sm_90a", "6") != key("sm_90a", "7"));
}
