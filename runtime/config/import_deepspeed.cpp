#include "runtime/config/import_deepspeed.hpp"

#include "runtime/config/import_common.hpp"

namespace accel::config {
namespace {

bool is_true(const YAML::Node& n) { return n.IsScalar() && (n.Scalar() == "true" || n.Scalar() == "True"); }

void read_offload(const YAML::Node& block, const std::string& prefix, const std::string& which, ForeignReader& r,
                  std::vector<Diagnostic>& structural) {
  for (auto& [key, value] : mapping_entries(block, r.file(), prefix, structural)) {
    std::string name = key.Scalar(), path = prefix + "." + name;
    if (name == "device") r.map(value, path, "deepspeed.offload_" + which + "_device");
    else if (name == "nvme_path") r.map(value, path, "deepspeed.offload_" + which + "_nvme_path");
    else if (name == "buffer_count") r.map(value, path, "deepspeed.buffer_count");
    else if (name == "pin_memory") r.map(value, path, "deepspeed.pin_memory");
    else if (name == "buffer_size" || name == "max_in_cpu" || name == "fast_init" || name == "pipeline_read" ||
             name == "pipeline_write" || name == "ratio")
      r.unused(value, path, "accel sizes its offload buffers from the model's units; this tuning knob has no effect");
    else r.unknown(key, path);
  }
}

void read_zero(const YAML::Node& zero, ForeignReader& r, std::vector<Diagnostic>& structural) {
  for (auto& [key, value] : mapping_entries(zero, r.file(), "zero_optimization", structural)) {
    std::string name = key.Scalar(), path = "zero_optimization." + name;
    static const std::set<std::string> direct = {
        "overlap_comm", "reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size",
        "stage3_param_persistence_threshold", "stage3_max_live_parameters", "zero_hpz_partition_size"};
    if (name == "stage") r.map(value, path, "deepspeed.zero_stage");
    else if (direct.count(name)) r.map(value, path, "deepspeed." + name);
    else if (name == "offload_optimizer" && value.IsMap()) read_offload(value, path, "optimizer", r, structural);
    else if (name == "offload_param" && value.IsMap()) read_offload(value, path, "param", r, structural);
    else if (name == "stage3_gather_16bit_weights_on_model_save" || name == "stage3_gather_fp16_weights_on_model_save")
      r.map(value, path, "deepspeed.zero3_save_16bit_model");
    else if (name == "contiguous_gradients" || name == "reduce_scatter" || name == "allgather_partitions")
      r.unused(value, path, "accel always reduces into contiguous flat buffers with reduce-scatter and gathers "
                            "partitions; this cannot be turned off", {"true"});
    else if (name == "round_robin_gradients" || name == "elastic_checkpoint" || name == "ignore_unused_parameters" ||
             name == "load_from_fp32_weights" || name == "use_multi_rank_bucket_allreduce")
      r.unused(value, path, "no effect in accel", {"false", "true"});
    else if (name == "sub_group_size" || name == "stage3_max_reuse_distance" || name == "zero_quantized_weights" ||
             name == "zero_quantized_gradients" || name == "cpu_offload" || name == "memory_efficient_linear")
      r.unused(value, path, "accel does not implement this ZeRO option", {"false"});
    else r.unknown(key, path);
  }
}

void read_precision(const YAML::Node& block, const std::string& name, ForeignReader& r, std::vector<Diagnostic>& structural) {
  for (auto& [key, value] : mapping_entries(block, r.file(), name, structural)) {
    std::string k = key.Scalar(), path = name + "." + k;
    if (k == "enabled") {
      if (ForeignReader::is_auto(value)) r.map(value, path, "mixed_precision");
      else if (is_true(value)) r.map(value, path, "mixed_precision", [&](const YAML::Node&) { return YAML::Node(name); });
      else r.out().notes.push_back(path + ": false, " + name + " not enabled");
    } else if (name == "fp16" && (k == "loss_scale" || k == "initial_scale_power" || k == "loss_scale_window" ||
                                  k == "hysteresis" || k == "min_loss_scale")) {
      r.map(value, path, "deepspeed." + k);
    } else if (k == "consecutive_hysteresis" || k == "auto_cast" || k == "immediate_grad_update") {
      r.unused(value, path, "accel's loss scaler follows DeepSpeed's defaults for this", {"false"});
    } else {
      r.unknown(key, path);
    }
  }
}

void read_optimizer(const YAML::Node& block, ForeignReader& r, std::vector<Diagnostic>& structural) {
  for (auto& [key, value] : mapping_entries(block, r.file(), "optimizer", structural)) {
    std::string k = key.Scalar();
    if (k == "type") {
      // DeepSpeed's "Adam" runs in AdamW mode unless adam_w_mode is false.
      std::string t = value.IsScalar() ? value.Scalar() : "";
      if (t == "AdamW" || t == "Adam" || t == "adamw" || t == "adam")
        r.map(value, "optimizer.type", "optimizer.name", [](const YAML::Node&) { return YAML::Node("adamw"); });
      else if (t == "SGD" || t == "sgd")
        r.map(value, "optimizer.type", "optimizer.name", [](const YAML::Node&) { return YAML::Node("sgd"); });
      else
        r.refuse(value, "optimizer.type", "optimizer not supported by accel", "AdamW | Adam | SGD",
                 "use AdamW (DeepSpeed's Adam in AdamW mode) or SGD");
    } else if (k == "params" && value.IsMap()) {
      for (auto& [pk, pv] : mapping_entries(value, r.file(), "optimizer.params", structural)) {
        std::string p = pk.Scalar(), path = "optimizer.params." + p;
        if (p == "lr" || p == "betas" || p == "eps" || p == "weight_decay" || p == "momentum")
          r.map(pv, path, "optimizer." + p);
        else if (p == "adam_w_mode" && !is_true(pv))
          r.refuse(pv, path, "Adam with L2 regularisation (adam_w_mode false) is not supported", "true",
                   "accel's AdamW uses decoupled weight decay");
        else if (p == "adam_w_mode" || p == "torch_adam" || p == "bias_correction")
          r.unused(pv, path, "accel's AdamW has torch.optim.AdamW semantics", {"true", "false"});
        else r.unknown(pk, path);
      }
    } else {
      r.unknown(key, "optimizer." + k);
    }
  }
}

// DeepSpeed schedulers that have an exact accel equivalent: WarmupLR (linear warmup, then constant)
// and WarmupCosineLR. Anything else would change the training curve, so it is refused.
void read_scheduler(const YAML::Node& block, ForeignReader& r, std::vector<Diagnostic>& structural) {
  std::string type = block["type"] && block["type"].IsScalar() ? block["type"].Scalar() : "";
  if (type != "WarmupLR" && type != "WarmupCosineLR") {
    r.refuse(block["type"] ? block["type"] : block, "scheduler.type", "scheduler not supported by accel",
             "WarmupLR | WarmupCosineLR", "use WarmupCosineLR (accel's cosine) or WarmupLR (accel's constant)");
    return;
  }
  r.map(block["type"], "scheduler.type", "scheduler.name",
        [&](const YAML::Node&) { return YAML::Node(type == "WarmupLR" ? "constant" : "cosine"); });
  if (!block["params"]) return;
  for (auto& [pk, pv] : mapping_entries(block["params"], r.file(), "scheduler.params", structural)) {
    std::string p = pk.Scalar(), path = "scheduler.params." + p;
    if (p == "warmup_num_steps") r.map(pv, path, "scheduler.warmup_steps");
    else if (p == "warmup_max_lr") r.map(pv, path, "optimizer.lr");
    else if (p == "total_num_steps") r.map(pv, path, "training.max_steps");
    else if (p == "cos_min_ratio") r.map(pv, path, "scheduler.min_lr_ratio");
    else if (p == "warmup_type") {
      if (!(pv.IsScalar() && (pv.Scalar() == "linear" || ForeignReader::is_auto(pv))))
        r.refuse(pv, path, "only linear warmup is supported", "linear", "set warmup_type to linear");
    } else if (p == "warmup_min_lr" || p == "warmup_min_ratio") {
      r.unused(pv, path, "accel's warmup starts from lr/warmup_steps, as spec/training.md defines", {"0", "0.0", "auto"});
    } else if (p == "last_batch_iteration") {
      r.unused(pv, path, "resume restores the schedule from the checkpoint", {"-1"});
    } else {
      r.unknown(pk, path);
    }
  }
}

}  // namespace

void import_deepspeed(const YAML::Node& root, const std::string& file, ImportResult& out) {
  ForeignReader r(file, "DeepSpeed", out);
  if (!root.IsMap()) {
    out.errors.push_back({"", node_location(file, root), "a DeepSpeed config must be a JSON object", "", "", ""});
    return;
  }
  std::vector<Diagnostic>& structural = out.errors;
  bool fp16 = root["fp16"] && is_true(root["fp16"]["enabled"]);
  bool bf16 = root["bf16"] && is_true(root["bf16"]["enabled"]);
  if (fp16 && bf16)
    r.refuse(root["bf16"]["enabled"], "bf16.enabled", "fp16 and bf16 are both enabled", "one of them",
             "enable only one precision");
  for (auto& [key, value] : mapping_entries(root, file, "", structural)) {
    std::string k = key.Scalar();
    if (k == "train_micro_batch_size_per_gpu") r.map(value, k, "training.micro_batch_size");
    else if (k == "gradient_accumulation_steps") r.map(value, k, "training.gradient_accumulation_steps");
    else if (k == "gradient_clipping") r.map(value, k, "training.max_grad_norm");
    else if (k == "steps_per_print") r.map(value, k, "training.log_every");
    else if (k == "train_batch_size") {
      if (ForeignReader::is_auto(value)) out.notes.push_back("train_batch_size: \"auto\", follows the job's batch");
      else if (value.IsScalar()) {
        try {
          out.batch = BatchConstraint{value.as<int64_t>(), r.where(value)};
        } catch (const YAML::Exception&) {
          r.refuse(value, k, "expected an integer", "integer >= 1 | \"auto\"", "");
        }
      }
    } else if (k == "zero_optimization" && value.IsMap()) read_zero(value, r, structural);
    else if ((k == "fp16" || k == "bf16" || k == "bfloat16") && value.IsMap()) read_precision(value, k == "bfloat16" ? "bf16" : k, r, structural);
    else if (k == "optimizer" && value.IsMap()) read_optimizer(value, r, structural);
    else if (k == "scheduler" && value.IsMap()) read_scheduler(value, r, structural);
    else if (k == "wall_clock_breakdown" || k == "dump_state" || k == "memory_breakdown" || k == "prescale_gradients" ||
             k == "zero_allow_untested_optimizer" || k == "zero_force_ds_cpu_optimizer")
      r.unused(value, k, "no effect in accel", {"false", "true"});
    else if (k == "gradient_predivide_factor") r.unused(value, k, "accel averages gradients once, after reduction", {"1", "1.0"});
    else if (k == "communication_data_type") r.unused(value, k, "accel communicates in the compute dtype");
    else if (k == "activation_checkpointing")
      r.unused(value, k, "accel recomputes activations under backend fsdp (fsdp.activation_checkpointing: true), "
                         "not under deepspeed");
    else if (k == "flops_profiler" || k == "tensorboard" || k == "wandb" ||
             k == "csv_monitor" || k == "comms_logger" || k == "aio" || k == "autotuning" || k == "elasticity" ||
             k == "compression_training" || k == "data_efficiency" || k == "amp" || k == "sparse_attention")
      r.unused(value, k, "accel has no equivalent of this DeepSpeed feature");
    else r.unknown(key, k);
  }
}

}  // namespace accel::config
