// Hugging Face config.json -> MoeSpec (runtime/model_config.cpp): the field names of each model
// family, routing rules the model code implies, Hugging Face class defaults for fields left out,
// per-layer lists, and the errors for fields of the wrong type or routers moejit lacks.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>

#include "common/error.h"
#include "runtime/model_config.h"

using namespace moejit;

TEST_CASE("moe: Hugging Face configs become MoE layer specs") {
  auto spec_of = [](const char* json) { return ModelMoeConfig::from_json(nlohmann::json::parse(json)).moe_spec(); };
  const MoeSpec oss = spec_of(R"({"model_type":"gpt_oss","num_local_experts":32,"num_experts_per_tok":4,
                                  "hidden_size":2880,"intermediate_size":2880,"hidden_act":"silu"})");
  CHECK(oss.activation == kActSwigluOai);
  CHECK(oss.has_bias);
  CHECK(oss.scoring == Scoring::SoftmaxAfterTopk);
  const MoeSpec llama = spec_of(R"({"model_type":"llama4","text_config":{"num_local_experts":16,
                                    "num_experts_per_tok":1,"hidden_size":5120,"intermediate_size":8192}})");
  CHECK(llama.router_weight_on_input);
  CHECK(llama.scoring == Scoring::Sigmoid);
  const MoeSpec dsv3 = spec_of(R"({"model_type":"deepseek_v3","n_routed_experts":256,"num_experts_per_tok":8,
                                   "hidden_size":7168,"moe_intermediate_size":2048,"n_group":8,"topk_group":4,
                                   "scoring_func":"sigmoid","routed_scaling_factor":2.5})");
  CHECK(dsv3.activation == kActSiluMul);
  CHECK(dsv3.n_group == 8);
  CHECK(dsv3.routed_scaling_factor == 2.5f);
  const MoeSpec gelu = spec_of(R"({"model_type":"x","num_experts":8,"num_experts_per_tok":2,"hidden_size":64,
                                   "intermediate_size":64,"hidden_act":"gelu_pytorch_tanh"})");
  CHECK(gelu.activation == kActGeluTanhMul);
  CHECK_THROWS_AS(spec_of(R"({"model_type":"x","num_experts":8,"num_experts_per_tok":2,"hidden_size":64,
                              "intermediate_size":64,"hidden_act":"mish"})"),
                  Error);
  // The layer runs in the config's torch_dtype (or dtype); bfloat16 when it names none.
  CHECK(gelu.dtype == kDTypeBF16);
  const MoeSpec f16 = spec_of(R"({"model_type":"mixtral","num_local_experts":8,"num_experts_per_tok":2,
                                  "hidden_size":64,"intermediate_size":64,"torch_dtype":"float16"})");
  CHECK(f16.dtype == kDTypeF16);
  const MoeSpec llama_f16 = spec_of(R"({"model_type":"llama4","text_config":{"num_local_experts":16,
                                        "num_experts_per_tok":1,"hidden_size":64,"intermediate_size":64,
                                        "dtype":"float16"},"torch_dtype":"bfloat16"})");
  CHECK(llama_f16.dtype == kDTypeF16);  // the text model's own field wins
  const auto fp32 = ModelMoeConfig::from_json(nlohmann::json::parse(
      R"({"model_type":"x","num_experts":8,"num_experts_per_tok":2,"hidden_size":64,"intermediate_size":64,
          "torch_dtype":"float32"})"));
  CHECK_THROWS_AS(fp32.moe_spec(), Error);  // no float32 experts: said, not run as bf16
  CHECK(fp32.moe_spec(kDTypeBF16).dtype == kDTypeBF16);  // unless the caller picks the dtype
  // Routing rules the model code implies: GLM-4.5 sigmoid scores (no scoring_func in its config),
  // Jamba without renormalization, Ling's score_function; phimoe's sparsemixer is refused.
  const MoeSpec glm = spec_of(R"({"model_type":"glm4_moe","n_routed_experts":128,"num_experts_per_tok":8,
                                  "hidden_size":4096,"moe_intermediate_size":1408,"n_group":1,"topk_group":1,
                                  "norm_topk_prob":true,"routed_scaling_factor":1.0,"hidden_act":"silu"})");
  CHECK(glm.scoring == Scoring::Sigmoid);
  CHECK(glm.renormalize);
  const MoeSpec jamba = spec_of(R"({"model_type":"jamba","num_experts":16,"num_experts_per_tok":2,
                                    "hidden_size":4096,"intermediate_size":14336,"hidden_act":"silu"})");
  CHECK_FALSE(jamba.renormalize);
  CHECK(jamba.scoring == Scoring::Softmax);
  CHECK(spec_of(R"({"model_type":"mixtral","num_local_experts":8,"num_experts_per_tok":2,"hidden_size":64,
                    "intermediate_size":64})").renormalize);
  // Fields a config leaves out (or states as null) take its Hugging Face class's defaults: Qwen2 /
  // Qwen3-MoE, OLMoE, DeepSeek-V2 and dots1 keep the top-k weights as they are; DeepSeek-V3 groups
  // (8 groups, 4 picked) and scales by 2.5. What a config states wins.
  for (const char* type : {"qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2", "dots1"}) {
    CAPTURE(type);
    const std::string base = fmt::format(R"("model_type":"{}","num_experts":64,"num_experts_per_tok":6,)"
                                         R"("hidden_size":64,"moe_intermediate_size":64)",
                                         type);
    const MoeSpec unstated = spec_of(("{" + base + "}").c_str());
    CHECK_FALSE(unstated.renormalize);
    CHECK(unstated.n_group == 1);
    CHECK(unstated.routed_scaling_factor == 1.0f);
    CHECK_FALSE(spec_of(("{" + base + R"(,"norm_topk_prob":null})").c_str()).renormalize);
    CHECK(spec_of(("{" + base + R"(,"norm_topk_prob":true})").c_str()).renormalize);
  }
  const MoeSpec v3_unstated = spec_of(R"({"model_type":"deepseek_v3","n_routed_experts":64,"num_experts_per_tok":8,
                                          "hidden_size":64,"moe_intermediate_size":64})");
  CHECK(v3_unstated.renormalize);
  CHECK(v3_unstated.n_group == 8);
  CHECK(v3_unstated.topk_group == 4);
  CHECK(v3_unstated.routed_scaling_factor == 2.5f);
  const MoeSpec v3_stated = spec_of(R"({"model_type":"deepseek_v3","n_routed_experts":64,"num_experts_per_tok":8,
                                        "hidden_size":64,"moe_intermediate_size":64,"n_group":1,"topk_group":1,
                                        "routed_scaling_factor":1.0,"norm_topk_prob":false})");
  CHECK_FALSE(v3_stated.renormalize);
  CHECK(v3_stated.n_group == 1);
  CHECK(v3_stated.routed_scaling_factor == 1.0f);
  const MoeSpec ling = spec_of(R"({"model_type":"bailing_moe","num_experts":256,"num_experts_per_tok":8,
                                   "hidden_size":2048,"moe_intermediate_size":512,"score_function":"sigmoid",
                                   "n_group":8,"topk_group":4,"norm_topk_prob":true})");
  CHECK(ling.scoring == Scoring::Sigmoid);
  CHECK(ling.n_group == 8);
  const MoeSpec nemo = spec_of(R"({"model_type":"nemotron_h","n_routed_experts":128,"num_experts_per_tok":6,
                                   "hidden_size":2688,"moe_intermediate_size":1856,"mlp_hidden_act":"relu2",
                                   "norm_topk_prob":true,"routed_scaling_factor":2.5,"n_group":1,"topk_group":1})");
  CHECK(nemo.scoring == Scoring::Sigmoid);
  CHECK(nemo.activation == kActRelu2);  // single input: up, relu^2, down
  CHECK(nemo.hidden == 2688);
  CHECK(spec_of(R"({"model_type":"nemotron_h","n_routed_experts":512,"num_experts_per_tok":22,"hidden_size":4096,
                    "moe_latent_size":1024,"moe_intermediate_size":2688,"mlp_hidden_act":"relu2"})").hidden == 1024);
  // mlp_hidden_act in Hugging Face's spellings, single-input; relu2 where the config does not say.
  auto nemotron_act = [&](const std::string& act) {
    const std::string stated = act.empty() ? "" : fmt::format(R"(,"mlp_hidden_act":"{}")", act);
    return spec_of(fmt::format(R"({{"model_type":"nemotron_h","n_routed_experts":8,"num_experts_per_tok":2,)"
                               R"("hidden_size":64,"moe_intermediate_size":64{}}})",
                               stated)
                       .c_str())
        .activation;
  };
  CHECK(nemotron_act("") == kActRelu2);
  CHECK(nemotron_act("relu_squared") == kActRelu2);
  CHECK(nemotron_act("gelu_new") == kActGeluTanh);
  CHECK(nemotron_act("silu") == kActSilu);
  CHECK(nemotron_act("gelu") == kActGelu);
  CHECK_THROWS_WITH_AS(nemotron_act("swiglu"), doctest::Contains("not a single-input activation"), Error);
  CHECK_THROWS_WITH_AS(nemotron_act("silu_mul"), doctest::Contains("not a single-input activation"), Error);
  CHECK_THROWS_WITH_AS(nemotron_act("tanhh"), doctest::Contains("unknown activation"), Error);
  CHECK_THROWS_WITH_AS(spec_of(R"({"model_type":"qwen3_moe","num_experts":8,"num_experts_per_tok":2,"hidden_size":64,
                                   "moe_intermediate_size":64,"quantization_config":{"quant_method":"gptq","bits":4,
                                   "group_size":32,"desc_act":true}})"),
                       doctest::Contains("desc_act"), Error);
  CHECK(spec_of(R"({"model_type":"qwen3_moe","num_experts":8,"num_experts_per_tok":2,"hidden_size":64,
                    "moe_intermediate_size":64,"quantization_config":{"quant_method":"gptq","bits":4,
                    "group_size":32,"desc_act":false}})").quant == kQuantInt4Group);
  CHECK(ModelMoeConfig::from_json(nlohmann::json::parse(R"({"model_type":null,"num_experts":8,"num_experts_per_tok":2,
                                  "hidden_size":64,"moe_intermediate_size":64})")).model_type == "unknown");
  CHECK_THROWS_WITH_AS(spec_of(R"({"model_type":7,"num_experts":8,"num_experts_per_tok":2,"hidden_size":64,
                                   "moe_intermediate_size":64})"),
                       doctest::Contains("field model_type = 7 has the wrong type"), Error);
  // A routing field present with another type is an error, not read as absent (which would route
  // with the defaults: no groups, no renormalization rule, scale 1).
  auto with = [&](const char* field) {
    return spec_of(fmt::format(R"({{"model_type":"deepseek_v3","n_routed_experts":64,"num_experts_per_tok":8,)"
                               R"("hidden_size":64,"moe_intermediate_size":64,{}}})",
                               field)
                       .c_str());
  };
  CHECK(with(R"("n_group":8,"topk_group":4,"norm_topk_prob":null)").n_group == 8);
  for (const char* bad : {R"("n_group":"8")", R"("n_group":8.5)", R"("topk_group":true)", R"("norm_topk_prob":1)",
                          R"("routed_scaling_factor":"2.5")", R"("scoring_func":["sigmoid"])", R"("hidden_act":7)",
                          R"("torch_dtype":16)"})
    CHECK_THROWS_WITH_AS(with(bad), doctest::Contains("has the wrong type"), Error);
  CHECK_THROWS_WITH_AS(with(R"("quantization_config":"fp8")"), doctest::Contains("quantization_config = \"fp8\" is not an object"),
                       Error);
  // ERNIE-4.5 (moe_num_experts, moe_k; softmax scores, correction bias for the selection, renormalized).
  const MoeSpec ernie = spec_of(R"({"model_type":"ernie4_5_moe","moe_num_experts":64,"moe_k":6,"hidden_size":2560,
                                    "moe_intermediate_size":1536,"intermediate_size":12288,"hidden_act":"silu"})");
  CHECK(ernie.num_experts == 64);
  CHECK(ernie.top_k == 6);
  CHECK(ernie.intermediate == 1536);
  CHECK(ernie.scoring == Scoring::Softmax);
  CHECK(ernie.renormalize);
  const MoeSpec dbrx = spec_of(R"({"model_type":"dbrx","d_model":6144,"torch_dtype":"bfloat16",
                                   "ffn_config":{"ffn_hidden_size":10752,"moe_num_experts":16,"moe_top_k":4,
                                   "ffn_act_fn":{"name":"silu"},"moe_normalize_expert_weights":1}})");
  CHECK(dbrx.num_experts == 16);
  CHECK(dbrx.top_k == 4);
  CHECK(dbrx.hidden == 6144);
  CHECK(dbrx.intermediate == 10752);
  CHECK(dbrx.activation == kActSiluMul);
  CHECK(dbrx.renormalize);
  CHECK_THROWS_WITH_AS(spec_of(R"({"model_type":"dbrx","d_model":64,"ffn_config":{"ffn_hidden_size":64,
                                   "moe_num_experts":4,"moe_top_k":2,"moe_normalize_expert_weights":2}})"),
                       doctest::Contains("moe_normalize_expert_weights"), Error);
  // Per-layer lists (Hunyuan's num_experts, moe_topk, moe_intermediate_size): equal entries are the
  // layer's value; layers that differ, or entries that are not positive integers, are errors.
  const MoeSpec hunyuan = spec_of(R"({"model_type":"hunyuan_v1_moe","num_experts":[64,64,64],"moe_topk":[8,8,8],
                                      "hidden_size":4096,"moe_intermediate_size":[3072,3072,3072]})");
  CHECK(hunyuan.num_experts == 64);
  CHECK(hunyuan.top_k == 8);
  CHECK(hunyuan.intermediate == 3072);
  CHECK(hunyuan.renormalize);
  CHECK_FALSE(spec_of(R"({"model_type":"hunyuan_v1_moe","num_experts":16,"moe_topk":1,"hidden_size":64,
                          "moe_intermediate_size":64})").renormalize);  // top-1: its softmax weight
  CHECK_THROWS_WITH_AS(spec_of(R"({"model_type":"hunyuan_v1_moe","num_experts":64,"moe_topk":[8,8,6],
                                   "hidden_size":4096,"moe_intermediate_size":3072})"),
                       doctest::Contains("moe_topk = [8,8,6] differs between layers"), Error);
  for (const char* bad : {R"([])", R"([8,0])", R"("8")", R"(8.5)", R"(-2)", R"([8,"8"])"})
    CHECK_THROWS_WITH_AS(spec_of(fmt::format(R"({{"model_type":"x","num_experts":64,"moe_topk":{},)"
                                             R"("hidden_size":64,"moe_intermediate_size":64}})",
                                             bad)
                                     .c_str()),
                         doctest::Contains("moe_topk"), Error);
  CHECK_THROWS_WITH_AS(spec_of(R"({"model_type":"phimoe","num_local_experts":16,"num_experts_per_tok":2,
                                   "hidden_size":4096,"intermediate_size":6400})"),
                       doctest::Contains("sparsemixer"), Error);
}
