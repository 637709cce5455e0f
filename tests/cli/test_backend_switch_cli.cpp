// The one-key backend switch through the executable: `accel launch` prints the translated options
// (pinned), `config show --resolved` shows what the backend runs with, and `config convert` turns
// every deepspeed template into a valid fsdp job and every fsdp template into a valid deepspeed job,
// with the expected values, and back (docs/design/0005-backend-switch.md).
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <sstream>

#include "support/accel_cli.hpp"
#include "support/run_command.hpp"
#include "support/temp_dir.hpp"

using accel::test::run_accel;
using accel::test::run_command;
using accel::test::shell_quote;
namespace fs = std::filesystem;

namespace {

const fs::path kSource = ACCEL_SOURCE_DIR;


std::string template_path(const std::string& name) { return (kSource / "config_templates" / name).string(); }

// `accel config show FILE` as {"section.key" -> value}.
std::map<std::string, std::string> shown(const std::string& file) {
  auto r = run_accel("config show " + shell_quote(file));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::map<std::string, std::string> keys;
  std::istringstream in(r.output);
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto colon = line.find(": ");
    if (line[0] != ' ' && line.back() == ':') {
      section = line.substr(0, line.size() - 1);
      continue;
    }
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    if (key[0] == ' ') key = section + "." + key.substr(key.find_first_not_of(' '));
    keys[key] = line.substr(colon + 2);
  }
  return keys;
}

// Converts `from` to `to`, checks the result validates, and returns the written file.
std::string convert(const std::string& from, const std::string& backend, const fs::path& out) {
  auto r = run_accel("config convert " + shell_quote(from) + " --to " + backend + " -o " + shell_quote(out.string()));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("wrote " + out.string()));
  auto v = run_accel("config validate " + shell_quote(out.string()));
  INFO(v.output);
  CHECK(v.exit_code == 0);
  CHECK_THAT(v.output, Catch::Contains("is a valid accel job (" + backend));
  return out.string();
}

// The showcase translations, as `accel launch` prints them at start.
const char* kZero3OffloadCpuToFsdp =
    "accel launch: backend fsdp: 6 options translated from the deepspeed block:\n"
    "  deepspeed.zero_stage: 3 -> fsdp.sharding_strategy: FULL_SHARD\n"
    "  deepspeed.offload_optimizer_device: cpu -> fsdp.offload_params: true\n"
    "  deepspeed.offload_param_device: cpu -> fsdp.offload_params: true\n"
    "  deepspeed.zero3_save_16bit_model: false (default) -> fsdp.state_dict_type: SHARDED_STATE_DICT  (DeepSpeed ZeRO-3 "
    "checkpoints are per-rank shards unless zero3_save_16bit_model gathers the full model)\n"
    "  deepspeed.stage3_prefetch_bucket_size: 50000000 (default) -> fsdp.forward_prefetch: true  (DeepSpeed ZeRO-3 "
    "prefetches in forward as well as in backward)\n"
    "  deepspeed: fp32 master weights, always -> fsdp.precision_mode: mixed  (FSDP's mixed mode keeps fp32 copies of the "
    "sharded parameters for the optimizer; low has no DeepSpeed equivalent)\n"
    "accel launch: backend fsdp: 1 deepspeed option has no fsdp equivalent and is not used:\n"
    "  deepspeed.pin_memory: true  (FSDP's CPU offload has no pinned-memory switch)\n";

}  // namespace

TEST_CASE("accel launch prints every translated option and every option with no equivalent, at start") {
  auto dry = run_accel("launch --dry-run " + shell_quote(template_path("deepspeed_zero3_offload_cpu.yaml")) +
                       " --set backend=fsdp");
  INFO(dry.output);
  REQUIRE(dry.exit_code == 0);
  CHECK_THAT(dry.output, Catch::Contains(kZero3OffloadCpuToFsdp));
  CHECK_THAT(dry.output, Catch::Contains("is valid: backend fsdp"));
  CHECK_THAT(dry.output, Catch::Contains("# derived (translated from deepspeed.zero_stage = 3, set at " +
                                         template_path("deepspeed_zero3_offload_cpu.yaml") + ":11:15)"));

  // An fsdp option that is not built is refused at launch (exit 2, naming the key), but only after
  // the translation has been printed.
  auto run = run_accel("launch " + shell_quote(template_path("deepspeed_zero3_offload_cpu.yaml")) +
                       " --set backend=fsdp --set device=cpu --set num_processes=1 --set fsdp.transformer_layer_cls_to_wrap=GPT2Block");
  INFO(run.output);
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.output, Catch::Contains(kZero3OffloadCpuToFsdp));
  const std::string refusal = "fsdp.transformer_layer_cls_to_wrap: 'GPT2Block' is not a layer class";
  CHECK_THAT(run.output, Catch::Contains(refusal));
  CHECK(run.output.find(kZero3OffloadCpuToFsdp) < run.output.find(refusal));

  auto hybrid = run_accel("launch --dry-run " + shell_quote(template_path("fsdp_hybrid_shard.yaml")) +
                          " --set backend=deepspeed");
  INFO(hybrid.output);
  REQUIRE(hybrid.exit_code == 0);
  CHECK_THAT(hybrid.output,
             Catch::Contains("accel launch: backend deepspeed: 10 options translated from the fsdp block") &&
                 Catch::Contains("  fsdp.sharding_strategy: HYBRID_SHARD -> deepspeed.zero_hpz_partition_size: 2") &&
                 Catch::Contains("accel launch: backend deepspeed: 3 fsdp options have no deepspeed equivalent"));

  // Translated values that equal DeepSpeed's defaults ask for nothing the backend lacks: no "no effect
  // yet" warning for them (the job then stops at the checkpoint to resume from, which is checked
  // after the warnings and before anything starts).
  auto to_ds = run_accel("launch " + shell_quote(template_path("fsdp_full_shard.yaml")) +
                         " --set backend=deepspeed --set device=cpu --set training.resume=" +
                         shell_quote(std::string(ACCEL_SOURCE_DIR) + "/config_templates"));
  INFO(to_ds.output);
  CHECK(to_ds.exit_code == 2);
  CHECK_THAT(to_ds.output, Catch::Contains("fsdp.sharding_strategy: FULL_SHARD -> deepspeed.zero_stage: 3") &&
                               Catch::Contains("config_templates is not a complete checkpoint") &&
                               !Catch::Contains("has no effect yet"));

  // A job written for its own backend prints nothing about translation.
  auto plain = run_accel("launch --dry-run " + shell_quote(template_path("deepspeed_zero3_offload_cpu.yaml")));
  CHECK(plain.exit_code == 0);
  CHECK_THAT(plain.output, !Catch::Contains("translated"));
}

TEST_CASE("config show --resolved shows what the selected backend runs with, naming translated sources") {
  accel::test::TempDir dir;
  auto r = run_accel("config show " + shell_quote(template_path("deepspeed_zero3.yaml")) +
                     " --set backend=fsdp --resolved");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("# backend fsdp: 6 options translated from the deepspeed block"));
  CHECK_THAT(r.output, Catch::Contains("#   deepspeed.stage3_param_persistence_threshold: 100000  (FSDP shards every "
                                       "parameter of a unit"));
  CHECK_THAT(r.output, Catch::Contains("# derived (translated from deepspeed.zero_stage = 3, set at "));
  CHECK_THAT(r.output, Catch::Contains("# derived (translated from deepspeed.stage3_prefetch_bucket_size = 50000000"));
  CHECK_THAT(r.output, !Catch::Contains("\ndeepspeed:") && !Catch::Contains("\nddp:"));
  // It is itself a job with the same effective settings.
  auto file = dir.write("resolved.yaml", r.output);
  auto again = shown(file);
  auto original = shown(template_path("deepspeed_zero3.yaml"));
  CHECK(again.at("fsdp.sharding_strategy") == "FULL_SHARD");
  CHECK(again.at("fsdp.forward_prefetch") == "true");
  CHECK(again.at("model.n_layer") == original.at("model.n_layer"));

  auto own = run_accel("config show " + shell_quote(template_path("fsdp_full_shard.yaml")) + " --resolved");
  CHECK_THAT(own.output, Catch::Contains("nothing was translated") && Catch::Contains("sharding_strategy: FULL_SHARD"));
}

TEST_CASE("config convert: every deepspeed template becomes a valid fsdp job, every fsdp template a valid "
          "deepspeed job, with the expected values") {
  const std::map<std::string, std::map<std::string, std::string>> expected = {
      {"deepspeed_zero1.yaml", {{"fsdp.sharding_strategy", "SHARD_GRAD_OP"}, {"fsdp.offload_params", "false"}}},
      {"deepspeed_zero2.yaml", {{"fsdp.sharding_strategy", "SHARD_GRAD_OP"}, {"fsdp.offload_params", "false"}}},
      {"deepspeed_zero3.yaml",
       {{"fsdp.sharding_strategy", "FULL_SHARD"}, {"fsdp.state_dict_type", "SHARDED_STATE_DICT"},
        {"fsdp.backward_prefetch", "BACKWARD_PRE"}, {"fsdp.forward_prefetch", "true"},
        {"fsdp.limit_all_gathers", "true"}, {"fsdp.precision_mode", "mixed"}}},
      {"deepspeed_zero3_offload_cpu.yaml",
       {{"fsdp.sharding_strategy", "FULL_SHARD"}, {"fsdp.offload_params", "true"},
        {"fsdp.state_dict_type", "SHARDED_STATE_DICT"}}},
      {"deepspeed_zero3_offload_nvme.yaml", {{"fsdp.sharding_strategy", "FULL_SHARD"}, {"fsdp.offload_params", "true"}}},
      {"fsdp_full_shard.yaml",
       {{"deepspeed.zero_stage", "3"}, {"deepspeed.offload_optimizer_device", "none"},
        {"deepspeed.zero3_save_16bit_model", "false"}, {"deepspeed.stage3_prefetch_bucket_size", "50000000"},
        {"deepspeed.stage3_max_live_parameters", "1000000000"}}},
      {"fsdp_shard_grad_op.yaml", {{"deepspeed.zero_stage", "2"}, {"deepspeed.offload_optimizer_device", "none"}}},
      {"fsdp_hybrid_shard.yaml", {{"deepspeed.zero_stage", "3"}, {"deepspeed.zero_hpz_partition_size", "2"}}},
      {"fsdp_offload.yaml",
       {{"deepspeed.zero_stage", "3"}, {"deepspeed.offload_optimizer_device", "cpu"},
        {"deepspeed.offload_param_device", "cpu"}}},
  };
  accel::test::TempDir dir;
  size_t seen = 0;
  for (const auto& e : fs::directory_iterator(kSource / "config_templates")) {
    std::string name = e.path().filename().string();
    bool ds = name.rfind("deepspeed_", 0) == 0, fsdp = name.rfind("fsdp_", 0) == 0;
    if (!ds && !fsdp) continue;
    SECTION(name) {
      REQUIRE(expected.count(name) == 1);  // a new template needs its expected translation here
      std::string to = ds ? "fsdp" : "deepspeed", from = ds ? "deepspeed" : "fsdp";
      auto out = convert(e.path().string(), to, dir.path() / ("to_" + name));
      std::string text = accel::test::read_file(out);
      CHECK_THAT(text, Catch::Contains("\nbackend: " + to + "\n") && !Catch::Contains("\n" + from + ":\n"));
      CHECK_THAT(text, Catch::Contains("# from " + std::string(ds ? "deepspeed.zero_stage" : "fsdp.sharding_strategy")));
      auto keys = shown(out);
      for (const auto& [key, value] : expected.at(name)) {
        INFO(key);
        CHECK(keys.at(key) == value);
      }
      // Everything outside the two blocks is the job as written.
      auto original = shown(e.path().string());
      for (const auto& [key, value] : original) {
        if (key.rfind("deepspeed.", 0) == 0 || key.rfind("fsdp.", 0) == 0 || key == "backend") continue;
        INFO(key);
        CHECK(keys.at(key) == value);
      }
    }
    ++seen;
  }
  CHECK(seen == expected.size());
}

TEST_CASE("round trips keep what is translatable: deepspeed -> fsdp -> deepspeed and fsdp -> deepspeed -> fsdp") {
  accel::test::TempDir dir;
  for (const char* name : {"deepspeed_zero1.yaml", "deepspeed_zero2.yaml", "deepspeed_zero3.yaml",
                           "deepspeed_zero3_offload_cpu.yaml", "deepspeed_zero3_offload_nvme.yaml"}) {
    SECTION(name) {
      auto there = convert(template_path(name), "fsdp", dir.path() / "there.yaml");
      auto back = convert(there, "deepspeed", dir.path() / "back.yaml");
      auto original = shown(template_path(name)), again = shown(back);
      CHECK(again.at("backend") == "deepspeed");
      // ZeRO-1 has no FSDP equivalent (nearest SHARD_GRAD_OP), so it comes back as stage 2.
      CHECK(again.at("deepspeed.zero_stage") == (original.at("deepspeed.zero_stage") == "1" ? "2" : original.at("deepspeed.zero_stage")));
      for (const char* key : {"deepspeed.offload_optimizer_device", "deepspeed.offload_param_device"}) {
        INFO(key);
        // FSDP has no NVMe offload: nvme comes back as cpu.
        CHECK(again.at(key) == (original.at(key) == "nvme" ? "cpu" : original.at(key)));
      }
      for (const char* key : {"deepspeed.zero3_init_flag", "deepspeed.zero3_save_16bit_model",
                              "deepspeed.zero_hpz_partition_size", "deepspeed.stage3_prefetch_bucket_size",
                              "deepspeed.stage3_max_live_parameters", "mixed_precision", "num_processes",
                              "training.max_grad_norm", "model.n_embd"}) {
        INFO(key);
        CHECK(again.at(key) == original.at(key));
      }
    }
  }
  for (const char* name : {"fsdp_full_shard.yaml", "fsdp_shard_grad_op.yaml", "fsdp_hybrid_shard.yaml",
                           "fsdp_offload.yaml"}) {
    SECTION(name) {
      auto there = convert(template_path(name), "deepspeed", dir.path() / "there.yaml");
      auto back = convert(there, "fsdp", dir.path() / "back.yaml");
      auto original = shown(template_path(name)), again = shown(back);
      for (const char* key : {"fsdp.sharding_strategy", "fsdp.offload_params", "fsdp.backward_prefetch",
                              "fsdp.limit_all_gathers", "fsdp.precision_mode", "fsdp.cpu_ram_efficient_loading",
                              "num_machines", "mixed_precision"}) {
        INFO(key);
        CHECK(again.at(key) == original.at(key));
      }
      // DeepSpeed has no backward-only prefetch, and no prefetch or checkpoint layout choice below stage 3.
      bool stage3 = original.at("fsdp.sharding_strategy") != "SHARD_GRAD_OP";
      CHECK(again.at("fsdp.forward_prefetch") == (stage3 ? "true" : original.at("fsdp.forward_prefetch")));
      CHECK(again.at("fsdp.state_dict_type") == (stage3 ? original.at("fsdp.state_dict_type") : "FULL_STATE_DICT"));
    }
  }
}
