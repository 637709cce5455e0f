#include "runtime/config/import_accelerate.hpp"

#include <filesystem>

#include "runtime/config/import_common.hpp"

namespace accel::config {
namespace {

const std::string kNoEffect = "it has no effect in accel; remove it to silence this warning";

// FSDP's ShardingStrategy enum values, which Accelerate also accepts as numbers.
YAML::Node sharding_strategy(const YAML::Node& node) {
  static const char* names[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"};
  if (!node.IsScalar()) return node;  // the enum check reports it with its position
  const std::string& text = node.Scalar();
  if (text.size() == 1 && text[0] >= '1' && text[0] <= '5') return YAML::Node(names[text[0] - '1']);
  return node;
}

// fsdp_backward_prefetch may be NO_PREFETCH, or the older name of the enum with a prefix.
YAML::Node backward_prefetch(const YAML::Node& node) {
  if (node.IsNull() || (node.IsScalar() && (node.Scalar() == "null" || node.Scalar().empty())))
    return YAML::Node("NO_PREFETCH");
  return node;  // a list or mapping reaches the enum check, which reports it
}

// fsdp_config keys whose meaning is exactly that of accel's fsdp.<name without the prefix>.
const std::vector<std::string> kSameMeaning = {
    "fsdp_forward_prefetch",     "fsdp_offload_params",   "fsdp_auto_wrap_policy",
    "fsdp_transformer_layer_cls_to_wrap", "fsdp_min_num_params", "fsdp_state_dict_type",
    "fsdp_sync_module_states",   "fsdp_cpu_ram_efficient_loading", "fsdp_activation_checkpointing",
    "fsdp_limit_all_gathers"};

void read_fsdp_config(const YAML::Node& section, ForeignReader& r) {
  for (auto& [key, value] : r.entries(section, "fsdp_config")) {
    KeyMatch k(key);
    const std::string& name = k.name();
    std::string path = "fsdp_config." + name;
    if (k.is("fsdp_sharding_strategy")) {
      if (value.IsScalar() && (value.Scalar() == "HYBRID_SHARD_ZERO2" || value.Scalar() == "5"))
        r.refuse(value, path, "HYBRID_SHARD_ZERO2 is not supported", "FULL_SHARD | SHARD_GRAD_OP | NO_SHARD | HYBRID_SHARD",
                 "use HYBRID_SHARD");
      else
        r.map(value, path, "fsdp.sharding_strategy", sharding_strategy);
    } else if (k.is("fsdp_reshard_after_forward")) {  // FSDP2 spelling of FULL_SHARD vs SHARD_GRAD_OP
      if (auto reshard = r.flag(value, path))
        r.map(value, path, "fsdp.sharding_strategy",
              [&](const YAML::Node&) { return YAML::Node(*reshard ? "FULL_SHARD" : "SHARD_GRAD_OP"); });
    } else if (k.any({"fsdp_backward_prefetch", "fsdp_backward_prefetch_policy"})) {
      r.map(value, path, "fsdp.backward_prefetch", backward_prefetch);
    } else if (name == "fsdp_state_dict_type" && value.IsScalar() && value.Scalar() == "LOCAL_STATE_DICT") {
      r.refuse(value, path, "LOCAL_STATE_DICT is not supported", "FULL_STATE_DICT | SHARDED_STATE_DICT",
               "use SHARDED_STATE_DICT (per-rank shards with a layout accel can merge)");
    } else if (k.any(kSameMeaning)) {
      r.map(value, path, "fsdp." + name.substr(5));  // fsdp_x -> fsdp.x
    } else if (k.is("fsdp_use_orig_params")) {
      r.unused(value, path, "accel units always keep the original parameter names; " + kNoEffect, {"true", "false"});
    } else if (k.is("fsdp_version")) {
      r.unused(value, path, "accel implements FSDP's sharding semantics in C++; the version has no effect", {"1", "2"});
    } else {
      r.unknown(key, path, k.tried());
    }
  }
}

void read_deepspeed_config(const YAML::Node& section, ForeignReader& r) {
  for (auto& [key, value] : r.entries(section, "deepspeed_config")) {
    KeyMatch k(key);
    const std::string& name = k.name();
    std::string path = "deepspeed_config." + name;
    if (k.any({"zero_stage", "offload_optimizer_device", "offload_param_device", "offload_optimizer_nvme_path",
               "offload_param_nvme_path", "zero3_init_flag", "zero3_save_16bit_model"})) {
      r.map(value, path, "deepspeed." + name);
    } else if (k.is("gradient_accumulation_steps")) {
      r.map(value, path, "training.gradient_accumulation_steps");
    } else if (k.is("gradient_clipping")) {
      r.map(value, path, "training.max_grad_norm");
    } else if (k.is("deepspeed_config_file")) {
      r.map(value, path, "deepspeed.config_file");
    } else if (k.is("deepspeed_multinode_launcher")) {
      r.unused(value, path, "accel launches its own workers on every machine (`accel launch` per machine)",
               {"standard", "pdsh"});
    } else if (k.any({"deepspeed_hostfile", "deepspeed_exclusion_filter", "deepspeed_inclusion_filter"})) {
      r.unused(value, path, "accel has no hostfile launcher; run `accel launch` on each machine with its machine_rank");
    } else if (k.is("deepspeed_moe_layer_cls_names")) {
      r.unused(value, path, "accel has no mixture-of-experts support");
    } else {
      r.unknown(key, path, k.tried());
    }
  }
}

}  // namespace

void import_accelerate(const YAML::Node& root, const std::string& file, ImportResult& out) {
  ForeignReader r(file, "Accelerate", out);
  for (auto& [key, value] : r.entries(root, "")) {
    KeyMatch k(key);
    const std::string& name = k.name();
    if (k.is("distributed_type")) {
      static const std::map<std::string, std::pair<const char*, const char*>> types = {
          {"NO", {"ddp", nullptr}},          {"MULTI_CPU", {"ddp", "cpu"}}, {"MULTI_GPU", {"ddp", "cuda"}},
          {"FSDP", {"fsdp", nullptr}},       {"DEEPSPEED", {"deepspeed", nullptr}}};
      auto it = value.IsScalar() ? types.find(value.Scalar()) : types.end();
      if (it == types.end()) {
        r.refuse(value, name, "distributed type not supported by accel", "NO | MULTI_CPU | MULTI_GPU | FSDP | DEEPSPEED",
                 "accel runs on CPUs and NVIDIA GPUs");
        continue;
      }
      r.map(value, name, "backend", [&](const YAML::Node&) { return YAML::Node(it->second.first); });
      if (it->second.second) r.map(value, name, "device", [&](const YAML::Node&) { return YAML::Node(it->second.second); });
    } else if (k.is("compute_environment")) {
      if (!(value.IsScalar() && value.Scalar() == "LOCAL_MACHINE"))
        r.refuse(value, name, "only local machines are supported", "LOCAL_MACHINE", "run accel on the machines directly");
    } else if (k.is("use_cpu")) {
      if (value.IsNull()) continue;
      if (auto cpu = r.flag(value, name); cpu && *cpu)
        r.map(value, name, "device", [](const YAML::Node&) { return YAML::Node("cpu"); });
    } else if (k.any({"num_processes", "num_machines", "machine_rank", "main_process_ip", "main_process_port",
                      "mixed_precision"})) {
      if (!value.IsNull()) r.map(value, name, name);
    } else if (k.is("fsdp_config")) {
      if (r.is_block(value, name)) read_fsdp_config(value, r);
    } else if (k.is("deepspeed_config")) {
      if (r.is_block(value, name)) read_deepspeed_config(value, r);
    } else if (k.is("gpu_ids")) {
      r.unused(value, name, "accel uses every visible GPU, one per local rank; restrict with CUDA_VISIBLE_DEVICES",
               {"all"});
    } else if (k.any({"debug", "tpu_use_cluster", "tpu_use_sudo", "enable_cpu_affinity"})) {
      r.unused(value, name, kNoEffect, {"false"});
    } else if (k.is("downcast_bf16")) {
      r.unused(value, name, "accel has no TPU path; " + kNoEffect, {"no", "false"});
    } else if (k.is("rdzv_backend")) {
      // etcd (torchrun's etcd and etcd-v2) is accel's etcd rendezvous (docs/design/0034); static and
      // c10d both mean machine 0's launcher hosting it, which is accel's default.
      if (value.IsScalar() && (value.Scalar() == "etcd" || value.Scalar() == "etcd-v2"))
        r.map(value, name, "rdzv_backend", [](const YAML::Node&) { return YAML::Node("etcd"); });
      else
        r.unused(value, name, "accel's launchers rendezvous on main_process_ip:main_process_port (rdzv_backend: etcd "
                 "is the other choice)", {"static", "c10d"});
    } else if (k.is("same_network")) {
      r.unused(value, name, kNoEffect, {"true"});
    } else if (k.is("main_training_function")) {
      r.unused(value, name, "accel runs its built-in trainer or the job's program", {"main"});
    } else if (k.any({"dynamo_config", "megatron_lm_config", "ipex_config", "mpirun_config", "fp8_config",
                      "parallelism_config", "commands", "command_file"}) ||
               name.rfind("tpu_", 0) == 0) {
      r.unused(value, name, "accel has no equivalent of this feature");
    } else {
      r.unknown(key, name, k.tried());
    }
  }
}

}  // namespace accel::config
