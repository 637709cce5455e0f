// The schema table is the contract: these tests pin the public key set (spec/config.md), the
// environment-variable names, and the generated reference doc, so none can drift silently.
#include <catch2/catch.hpp>

#include <set>

#include "runtime/config/dump.hpp"
#include "runtime/config/schema.hpp"
#include "support/temp_dir.hpp"

using namespace accel::config;

TEST_CASE("every key of the public contract (spec/config.md) is in the schema") {
  // Copied from the contract's example file; a removed or renamed key breaks users' jobs.
  const std::vector<std::string> contract = {
      "backend", "num_processes", "num_machines", "machine_rank", "main_process_ip", "main_process_port", "device",
      "mixed_precision", "max_restarts", "deepspeed.zero_stage", "deepspeed.offload_optimizer_device",
      "deepspeed.offload_param_device", "deepspeed.offload_optimizer_nvme_path", "deepspeed.offload_param_nvme_path",
      "deepspeed.config_file", "deepspeed.overlap_comm", "deepspeed.reduce_bucket_size",
      "deepspeed.allgather_bucket_size", "deepspeed.stage3_prefetch_bucket_size",
      "deepspeed.stage3_param_persistence_threshold", "deepspeed.stage3_max_live_parameters",
      "deepspeed.initial_scale_power", "deepspeed.loss_scale_window", "deepspeed.hysteresis",
      "deepspeed.min_loss_scale", "fsdp.sharding_strategy", "fsdp.backward_prefetch", "fsdp.forward_prefetch",
      "fsdp.limit_all_gathers", "fsdp.offload_params", "fsdp.auto_wrap_policy", "fsdp.transformer_layer_cls_to_wrap",
      "fsdp.min_num_params", "fsdp.state_dict_type", "fsdp.sync_module_states", "fsdp.activation_checkpointing",
      "fsdp.precision_mode", "model.name", "model.n_layer", "model.n_head", "model.n_embd", "model.vocab_size",
      "model.block_size", "model.dtype", "model.n_kv_head", "model.intermediate_size", "model.head_dim",
      "model.rope_theta", "model.rope_scaling", "model.rope_scaling_factor", "model.rope_scaling_low_freq_factor",
      "model.rope_scaling_high_freq_factor", "model.rope_scaling_original_max_position_embeddings", "model.norm_eps",
      "model.tie_word_embeddings", "model.attention_bias", "model.mlp_bias", "model.sliding_window", "data.kind", "data.path", "data.order", "optimizer.name", "optimizer.lr",
      "optimizer.weight_decay", "optimizer.betas", "optimizer.eps", "scheduler.name", "scheduler.warmup_steps",
      "scheduler.min_lr_ratio", "training.max_steps", "training.micro_batch_size",
      "training.gradient_accumulation_steps", "training.seq_len", "training.max_grad_norm", "training.seed",
      "training.output_dir", "training.log_every", "training.eval_every", "training.checkpoint_every",
      "training.async_checkpoint", "training.resume", "training.init_from", "training.save_weights"};
  for (const auto& key : contract) {
    INFO(key);
    CHECK(find_field(key) != nullptr);
  }
}

TEST_CASE("every key is documented, and enum keys list their values") {
  for (const auto& f : schema()) {
    INFO(f.path);
    CHECK(f.doc.size() > 10);
    if (f.type == FieldType::Enum) CHECK(f.allowed_values().size() >= 2);
  }
}

TEST_CASE("environment variable names are unique and follow ACCEL_<SECTION>_<KEY>") {
  std::set<std::string> names;
  for (const auto& f : schema()) {
    INFO(f.path);
    CHECK(names.insert(f.env_var()).second);
  }
  CHECK(find_field("deepspeed.zero_stage")->env_var() == "ACCEL_DEEPSPEED_ZERO_STAGE");
  CHECK(find_field("backend")->env_var() == "ACCEL_BACKEND");
  for (const auto& reserved : reserved_env_vars()) CHECK(names.count(reserved) == 0);
}

TEST_CASE("defaults survive a dump: every default reads back as itself") {
  JobConfig defaults;
  for (const auto& f : schema()) {
    INFO(f.path);
    auto text = value_to_yaml(f.get(defaults));
    CHECK(!text.empty());
  }
  CHECK(value_to_yaml(Value{std::string("no")}) == "\"no\"");
  CHECK(value_to_yaml(Value{std::string("Block")}) == "Block");
  CHECK(value_to_yaml(Value{0.1}) == "0.1");
  CHECK(value_to_yaml(Value{1.0}) == "1.0");
  CHECK(value_to_yaml(Value{std::vector<double>{0.9, 0.95}}) == "[0.9, 0.95]");
}

TEST_CASE("docs/config-reference.md is the output of `accel config keys --markdown`") {
  std::string doc = accel::test::read_file(std::string(ACCEL_SOURCE_DIR) + "/docs/config-reference.md");
  auto table = describe_keys(true);
  INFO("regenerate with: scripts/gen_config_reference.sh");
  CHECK(doc.find(table) != std::string::npos);
}
