// A Llama/Mistral config.json into the model section and back (runtime/hf), and the model record a
// checkpoint keeps for merge-weights --format hf (runtime/config/model_record). No torch: the
// folders here hold only config.json; check_paths is off, so no weights are listed.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "load_job_test_support.hpp"
#include "runtime/config/model_record.hpp"
#include "runtime/hf/hf_family.hpp"

namespace fs = std::filesystem;
using accel::config::LoadedJob;
using accel::config::ModelName;
using accel::config::RopeScaling;
using nlohmann::json;

namespace {

// A temporary folder with config.json and a job naming it.
struct Folder {
  fs::path dir;
  explicit Folder(const json& config, const std::string& job_extra = "") {
    dir = fs::temp_directory_path() / ("accel_hf_llama_cfg_" + std::to_string(::getpid()) + "_" +
                                       std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::create_directories(dir / "model");
    std::ofstream(dir / "model" / "config.json") << config.dump(2);
    std::ofstream(dir / "job.yaml") << "model:\n  from_pretrained: model\n" << job_extra;
  }
  ~Folder() { fs::remove_all(dir); }
  LoadedJob load(std::vector<std::string> sets = {}) const {
    accel::config::LoadOptions o;
    o.file = (dir / "job.yaml").string();
    o.set_overrides = std::move(sets);
    o.check_paths = false;
    return accel::config::load_job(o);
  }
};

// Llama 3.1 8B's config.json as published (top-level rope_theta, rope_scaling llama3), scaled down.
json llama31() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 64},
          {"intermediate_size", 224}, {"num_hidden_layers", 2}, {"num_attention_heads", 8},
          {"num_key_value_heads", 2}, {"max_position_embeddings", 512}, {"vocab_size", 1000},
          {"rms_norm_eps", 1e-5}, {"rope_theta", 500000.0}, {"hidden_act", "silu"}, {"tie_word_embeddings", false},
          {"attention_bias", false}, {"mlp_bias", false}, {"pretraining_tp", 1},
          {"rope_scaling",
           {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
            {"original_max_position_embeddings", 256}}}};
}

}  // namespace

TEST_CASE("a published Llama 3.1 config.json sets every llama key") {
  Folder f(llama31());
  const auto m = f.load().job.model;
  CHECK(m.name == ModelName::llama);
  CHECK(m.n_layer == 2);
  CHECK(m.n_head == 8);
  CHECK(m.n_kv_head == 2);
  CHECK(m.n_embd == 64);
  CHECK(m.intermediate_size == 224);
  CHECK(m.vocab_size == 1000);
  CHECK(m.block_size == 512);
  CHECK(m.rope_theta == 500000.0);
  CHECK(m.rope_scaling == RopeScaling::llama3);
  CHECK(m.rope_scaling_factor == 8.0);
  CHECK(m.rope_scaling_original_max_position_embeddings == 256);
  CHECK(m.norm_eps == 1e-5);
  CHECK_FALSE(m.tie_word_embeddings);
}

TEST_CASE("transformers 5's rope_parameters spelling and LlamaConfig's defaults") {
  json c = llama31();
  c.erase("rope_theta");
  c.erase("rope_scaling");
  c.erase("rms_norm_eps");
  c.erase("num_key_value_heads");
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  c["head_dim"] = 8;  // 64 / 8: the derived value, spelled out as transformers 5 writes it
  Folder f(c);
  const auto m = f.load().job.model;
  CHECK(m.rope_theta == 1000000.0);
  CHECK(m.rope_scaling == RopeScaling::none);
  CHECK(m.norm_eps == 1e-6);  // LlamaConfig's default
  CHECK(m.n_kv_head == 0);    // absent: n_head
  CHECK(m.head_dim == 0);     // equal to n_embd / n_head: left derived
}

TEST_CASE("config.json values accel's llama does not compute are refused by key") {
  json yarn = llama31();
  yarn["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  CHECK(accel::test::error_text([&] { Folder(yarn).load(); }).find("rope_type yarn") != std::string::npos);
  json gelu = llama31();
  gelu["hidden_act"] = "gelu";
  CHECK(accel::test::error_text([&] { Folder(gelu).load(); }).find("\"hidden_act\" is \"gelu\"") != std::string::npos);
  json dropout = llama31();
  dropout["attention_dropout"] = 0.1;
  CHECK(accel::test::error_text([&] { Folder(dropout).load(); }).find("\"attention_dropout\"") != std::string::npos);
  json granite = llama31();
  granite["architectures"] = {"GraniteForCausalLM"};
  CHECK(accel::test::error_text([&] { Folder(granite).load(); }).find("multipliers") != std::string::npos);
  // A job key that disagrees with the folder names both; one that agrees is fine.
  Folder f(llama31());
  CHECK(accel::test::error_text([&] { f.load({"model.n_kv_head=4"}); }).find("\"num_key_value_heads\" is 2") !=
        std::string::npos);
  CHECK(f.load({"model.n_kv_head=2"}).job.model.n_kv_head == 2);
}

TEST_CASE("the llama config.json accel writes reads back to the same model section") {
  Folder source(llama31());
  const auto m = source.load().job.model;
  const auto written = accel::hf::config_json(m, "bfloat16");
  CHECK(written["architectures"][0] == "LlamaForCausalLM");
  CHECK(written["num_key_value_heads"] == 2);
  CHECK(written["head_dim"] == 8);
  CHECK(written["rope_scaling"]["rope_type"] == "llama3");
  Folder back(json::parse(written.dump()));
  const auto again = back.load().job.model;
  CHECK(accel::config::model_section_json(again) == accel::config::model_section_json(m));
}

TEST_CASE("a checkpoint's model record holds every model key and rebuilds the section") {
  Folder f(llama31());
  const auto m = f.load().job.model;
  const json record = accel::config::model_section_json(m);
  CHECK(record["n_kv_head"] == 2);
  CHECK(record["rope_scaling"] == "llama3");
  CHECK_FALSE(record.contains("from_pretrained"));
  const auto back = accel::config::model_section_from_json(record, "trainer.json");
  CHECK(accel::config::model_section_json(back) == record);
  // An older record (name and the five gpt sizes) keeps the other keys' defaults.
  const auto old = accel::config::model_section_from_json(
      {{"name", "gpt"}, {"n_layer", 2}, {"n_head", 2}, {"n_embd", 32}, {"vocab_size", 256}, {"block_size", 64}}, "t");
  CHECK(old.name == ModelName::gpt);
  CHECK(old.n_embd == 32);
  // A hostile or damaged record is a usage error naming the key.
  json bad = record;
  bad["n_kv_head"] = 3;  // 8 heads are not a multiple of 3
  CHECK_THROWS_AS(accel::config::model_section_from_json(bad, "t"), accel::UsageError);
  bad = record;
  bad["rope_scaling"] = "yarn";
  CHECK_THROWS_AS(accel::config::model_section_from_json(bad, "t"), accel::UsageError);
}
