#include "runtime/config/import_deepspeed.hpp"

#include <algorithm>
#include <charconv>

#include "runtime/common/strings.hpp"
#include "runtime/config/deepspeed_keys.hpp"
#include "runtime/config/import_common.hpp"
#include "runtime/config/suggest.hpp"

namespace accel::config {
namespace {

bool is_true(const YAML::Node& n) { return n.IsScalar() && (n.Scalar() == "true" || n.Scalar() == "True"); }

// True, with an error, when `section` is one DeepSpeed closes (deepspeed_keys.hpp) and `key` is
// none of its fields: DeepSpeed would refuse the file, so a run must not start on it either.
bool refused_by_deepspeed(const YAML::Node& key, const std::string& section, ForeignReader& r) {
  const auto* known = deepspeed_section_keys(section);
  std::string name = key.IsScalar() ? key.Scalar() : node_text(key);
  if (!known || std::find(known->begin(), known->end(), name) != known->end()) return false;
  const std::string allowed = join(*known);
  std::string guess = nearest(name, *known);
  r.out().errors.push_back({section + "." + name, r.where(key), "unknown DeepSpeed key", "", allowed,
                            guess.empty() ? "remove it: DeepSpeed refuses a key its " + section + " section does not define"
                                          : "did you mean '" + guess + "'?"});
  return true;
}

// A block accel does not act on: the closed sections in it, at any depth, are still checked.
void check_unread_block(const YAML::Node& block, const std::string& section, ForeignReader& r) {
  if (!block.IsMap()) return;
  for (auto it = block.begin(); it != block.end(); ++it)
    if (!refused_by_deepspeed(it->first, section, r) && it->first.IsScalar())
      check_unread_block(it->second, section + "." + it->first.Scalar(), r);
}

// The last branch of a closed section's reader: a key DeepSpeed knows that accel does not implement.
void not_implemented(const YAML::Node& value, const std::string& path, ForeignReader& r) {
  check_unread_block(value, path, r);
  r.unused(value, path, "accel does not implement this DeepSpeed option");
}

void read_offload(const YAML::Node& block, const std::string& prefix, const std::string& which, ForeignReader& r) {
  for (auto& [key, value] : r.entries(block, prefix)) {
    if (refused_by_deepspeed(key, prefix, r)) continue;
    KeyMatch k(key);
    std::string path = prefix + "." + k.name();
    if (k.is("device")) r.map(value, path, "deepspeed.offload_" + which + "_device");
    else if (k.is("nvme_path")) r.map(value, path, "deepspeed.offload_" + which + "_nvme_path");
    else if (k.is("buffer_count")) r.map(value, path, "deepspeed.buffer_count");
    else if (k.is("pin_memory")) r.map(value, path, "deepspeed.pin_memory");
    else if (k.any({"buffer_size", "max_in_cpu", "fast_init", "pipeline", "pipeline_read", "pipeline_write", "ratio"}))
      r.unused(value, path, "accel sizes its offload buffers from the model's units; this tuning knob has no effect");
    else not_implemented(value, path, r);
  }
}

void read_zero(const YAML::Node& zero, ForeignReader& r) {
  for (auto& [key, value] : r.entries(zero, "zero_optimization")) {
    if (refused_by_deepspeed(key, "zero_optimization", r)) continue;
    KeyMatch k(key);
    const std::string& name = k.name();
    std::string path = "zero_optimization." + name;
    // DeepSpeed accepts the stage3_ keys with and without their prefix.
    if (k.is("stage")) r.map(value, path, "deepspeed.zero_stage");
    else if (k.any({"overlap_comm", "reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size",
                    "stage3_param_persistence_threshold", "stage3_max_live_parameters", "zero_hpz_partition_size"}))
      r.map(value, path, "deepspeed." + name);
    else if (k.any({"prefetch_bucket_size", "param_persistence_threshold", "max_live_parameters"}))
      r.map(value, path, "deepspeed.stage3_" + name);
    else if (k.is("offload_optimizer")) {
      if (r.is_block(value, path)) read_offload(value, path, "optimizer", r);
    } else if (k.is("offload_param")) {
      if (r.is_block(value, path)) read_offload(value, path, "param", r);
    } else if (k.any({"stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save",
                      "gather_16bit_weights_on_model_save"}))
      r.map(value, path, "deepspeed.zero3_save_16bit_model");
    else if (k.any({"contiguous_gradients", "reduce_scatter", "allgather_partitions"}))
      r.unused(value, path, "accel always reduces into contiguous flat buffers with reduce-scatter and gathers "
                            "partitions; this cannot be turned off", {"true"});
    else if (k.any({"round_robin_gradients", "elastic_checkpoint", "ignore_unused_parameters", "load_from_fp32_weights",
                    "use_multi_rank_bucket_allreduce"}))
      r.unused(value, path, "no effect in accel", {"false", "true"});
    else if (k.any({"sub_group_size", "stage3_max_reuse_distance", "max_reuse_distance",
                    "stage3_model_persistence_threshold", "model_persistence_threshold", "zero_quantized_weights",
                    "zero_quantized_gradients", "cpu_offload", "cpu_offload_param", "cpu_offload_use_pin_memory",
                    "memory_efficient_linear"}))
      r.unused(value, path, "accel does not implement this ZeRO option", {"false"});
    else not_implemented(value, path, r);
  }
}

void read_precision(const YAML::Node& block, const std::string& name, ForeignReader& r) {
  for (auto& [key, value] : r.entries(block, name)) {
    if (refused_by_deepspeed(key, name, r)) continue;
    KeyMatch k(key);
    std::string path = name + "." + k.name();
    if (k.is("enabled")) {
      if (ForeignReader::is_auto(value)) r.map(value, path, "mixed_precision");
      else if (auto on = r.flag(value, path); on && *on)
        r.map(value, path, "mixed_precision", [&](const YAML::Node&) { return YAML::Node(name); });
      else if (on) r.out().notes.push_back(path + ": false, " + name + " not enabled");
    } else if (name == "fp16" &&
               k.any({"loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale"})) {
      r.map(value, path, "deepspeed." + k.name());
    } else if (k.any({"consecutive_hysteresis", "auto_cast", "immediate_grad_update"})) {
      r.unused(value, path, "accel's loss scaler follows DeepSpeed's defaults for this", {"false"});
    } else {
      not_implemented(value, path, r);
    }
  }
}

void read_optimizer_params(const YAML::Node& params, ForeignReader& r) {
  for (auto& [key, value] : r.entries(params, "optimizer.params")) {
    KeyMatch k(key);
    std::string path = "optimizer.params." + k.name();
    if (k.any({"lr", "betas", "eps", "weight_decay", "momentum"})) r.map(value, path, "optimizer." + k.name());
    else if (k.is("adam_w_mode") && !is_true(value))
      r.refuse(value, path, "Adam with L2 regularisation (adam_w_mode false) is not supported", "true",
               "accel's AdamW uses decoupled weight decay");
    else if (k.is("torch_adam"))
      // DeepSpeed's default is its fused kernel on a GPU (FusedAdam); torch_adam picks torch's
      // unfused AdamW: accel's optimizer.fused false. false keeps accel's auto (fused on a GPU).
      r.map(value, path, "optimizer.fused",
            [](const YAML::Node& v) { return YAML::Node(is_true(v) ? "false" : "auto"); });
    else if (k.any({"adam_w_mode", "bias_correction"}))
      r.unused(value, path, "accel's AdamW has torch.optim.AdamW semantics", {"true", "false"});
    else r.unknown(key, path, k.tried());
  }
}

void read_optimizer(const YAML::Node& block, ForeignReader& r) {
  for (auto& [key, value] : r.entries(block, "optimizer")) {
    KeyMatch k(key);
    if (k.is("type")) {
      // DeepSpeed's "Adam" runs in AdamW mode unless adam_w_mode is false.
      std::string t = value.IsScalar() ? value.Scalar() : "";
      if (t == "AdamW" || t == "Adam" || t == "adamw" || t == "adam")
        r.map(value, "optimizer.type", "optimizer.name", [](const YAML::Node&) { return YAML::Node("adamw"); });
      else if (t == "SGD" || t == "sgd")
        r.map(value, "optimizer.type", "optimizer.name", [](const YAML::Node&) { return YAML::Node("sgd"); });
      else
        r.refuse(value, "optimizer.type", "optimizer not supported by accel", "AdamW | Adam | SGD",
                 "use AdamW (DeepSpeed's Adam in AdamW mode) or SGD");
    } else if (k.is("params")) {
      if (r.is_block(value, "optimizer.params")) read_optimizer_params(value, r);
    } else {
      r.unknown(key, "optimizer." + k.name(), k.tried());
    }
  }
}

void read_scheduler_params(const YAML::Node& params, ForeignReader& r) {
  for (auto& [key, value] : r.entries(params, "scheduler.params")) {
    KeyMatch k(key);
    std::string path = "scheduler.params." + k.name();
    if (k.is("warmup_num_steps")) r.map(value, path, "scheduler.warmup_steps");
    else if (k.is("warmup_max_lr")) r.map(value, path, "optimizer.lr");
    else if (k.is("total_num_steps")) r.map(value, path, "training.max_steps");
    else if (k.is("cos_min_ratio")) r.map(value, path, "scheduler.min_lr_ratio");
    else if (k.is("warmup_type")) {
      if (!(value.IsScalar() && (value.Scalar() == "linear" || ForeignReader::is_auto(value))))
        r.refuse(value, path, "only linear warmup is supported", "linear", "set warmup_type to linear");
    } else if (k.any({"warmup_min_lr", "warmup_min_ratio"})) {
      r.unused(value, path, "accel's warmup starts from lr/warmup_steps, as spec/training.md defines", {"0", "0.0", "auto"});
    } else if (k.is("last_batch_iteration")) {
      r.unused(value, path, "resume restores the schedule from the checkpoint", {"-1"});
    } else {
      r.unknown(key, path, k.tried());
    }
  }
}

// DeepSpeed schedulers that have an exact accel equivalent: WarmupLR (linear warmup, then constant)
// and WarmupCosineLR. Anything else would change the training curve, so it is refused.
void read_scheduler(const YAML::Node& block, ForeignReader& r) {
  YAML::Node type_node = find_child(block, "type");
  std::string type = type_node.IsScalar() ? type_node.Scalar() : "";
  if (type != "WarmupLR" && type != "WarmupCosineLR") {
    r.refuse(type_node ? type_node : block, "scheduler.type", "scheduler not supported by accel",
             "WarmupLR | WarmupCosineLR", "use WarmupCosineLR (accel's cosine) or WarmupLR (accel's constant)");
    return;
  }
  // DeepSpeed 0.19.8 warms both up on a log curve (from warmup_min_lr) unless warmup_type says
  // linear, and WarmupLR warms up for 1000 steps when warmup_num_steps is absent: accel's warmup is
  // linear, so a file that leaves the curve to DeepSpeed's default would not train the same curve.
  YAML::Node params = find_child(block, "params");
  YAML::Node warmup_type = find_child(params, "warmup_type");  // undefined when params is not a mapping
  YAML::Node warmup_steps = find_child(params, "warmup_num_steps");
  const bool no_warmup = warmup_steps.IsScalar() && (warmup_steps.Scalar() == "0");
  if (!warmup_type && !no_warmup && (!params || params.IsMap()))
    r.refuse(params ? params : type_node, "scheduler.params.warmup_type",
             "not given: DeepSpeed's " + type + " then warms up on a log curve (its default), and accel's warmup is linear",
             "\"linear\"", "add \"warmup_type\": \"linear\" to scheduler.params (the curve accel trains), or set "
             "\"warmup_num_steps\": 0");
  for (auto& [key, value] : r.entries(block, "scheduler")) {
    KeyMatch k(key);
    if (k.is("type"))
      r.map(value, "scheduler.type", "scheduler.name",
            [&](const YAML::Node&) { return YAML::Node(type == "WarmupLR" ? "constant" : "cosine"); });
    else if (k.is("params")) {
      if (r.is_block(value, "scheduler.params")) read_scheduler_params(value, r);
    } else {
      r.unknown(key, "scheduler." + k.name(), k.tried());
    }
  }
}

// DeepSpeed's train_batch_size: "auto", or a positive integer checked once the world size is known.
void read_train_batch_size(const YAML::Node& value, ForeignReader& r) {
  if (ForeignReader::is_auto(value)) {
    r.out().notes.push_back("train_batch_size: \"auto\", follows the job's batch");
    return;
  }
  int64_t n = 0;
  const std::string text = value.IsScalar() ? value.Scalar() : "";
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || n < 1) {
    r.refuse(value, "train_batch_size", "expected an integer >= 1", "integer >= 1 | \"auto\"", "");
    return;
  }
  r.out().batch = BatchConstraint{n, r.where(value)};
}

}  // namespace

void import_deepspeed(const YAML::Node& root, const std::string& file, ImportResult& out) {
  ForeignReader r(file, "DeepSpeed", out);
  if (!root.IsMap()) {
    // An empty file has no node to point at (line 0): the object belongs on its first line.
    auto where = node_location(file, root);
    if (where.line == 0) where = Location::in_file(file, 1, 1);
    out.errors.push_back({"", where,
                          root.IsNull() ? "the DeepSpeed config is empty" : "a DeepSpeed config must be a JSON object",
                          root.IsNull() ? "" : node_text(root), "",
                          "write a JSON object, for example {\"train_micro_batch_size_per_gpu\": 4}"});
    return;
  }
  // find_child, not operator[]: "bf16" may be a scalar, or lack "enabled", and neither may throw.
  auto enabled = [&](const char* block) { return find_child(find_child(root, block), "enabled"); };
  YAML::Node bf16_enabled = is_true(enabled("bf16")) ? enabled("bf16") : enabled("bfloat16");
  if (is_true(enabled("fp16")) && is_true(bf16_enabled))
    r.refuse(bf16_enabled, "bf16.enabled", "fp16 and bf16 are both enabled", "one of them", "enable only one precision");
  for (auto& [key, value] : r.entries(root, "")) {
    KeyMatch k(key);
    const std::string& name = k.name();
    if (k.is("train_micro_batch_size_per_gpu")) r.map(value, name, "training.micro_batch_size");
    else if (k.is("gradient_accumulation_steps")) r.map(value, name, "training.gradient_accumulation_steps");
    else if (k.is("gradient_clipping")) r.map(value, name, "training.max_grad_norm");
    else if (k.is("steps_per_print")) r.map(value, name, "training.log_every");
    else if (k.is("train_batch_size")) read_train_batch_size(value, r);
    else if (k.is("zero_optimization")) {
      if (r.is_block(value, name)) read_zero(value, r);
    } else if (k.any({"fp16", "bf16", "bfloat16"})) {
      if (r.is_block(value, name)) read_precision(value, name == "bfloat16" ? "bf16" : name, r);
    } else if (k.is("optimizer")) {
      if (r.is_block(value, name)) read_optimizer(value, r);
    } else if (k.is("scheduler")) {
      if (r.is_block(value, name)) read_scheduler(value, r);
    } else if (k.any({"wall_clock_breakdown", "dump_state", "memory_breakdown", "prescale_gradients",
                      "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer"}))
      r.unused(value, name, "no effect in accel", {"false", "true"});
    else if (k.is("gradient_predivide_factor")) r.unused(value, name, "accel averages gradients once, after reduction", {"1", "1.0"});
    else if (k.is("communication_data_type")) r.unused(value, name, "accel communicates in the compute dtype");
    else if (k.is("activation_checkpointing"))
      r.unused(value, name, "accel recomputes activations under backend fsdp (fsdp.activation_checkpointing: true), "
                            "not under deepspeed");
    else if (k.any({"flops_profiler", "tensorboard", "wandb", "csv_monitor", "comet", "comms_logger", "aio",
                    "autotuning", "elasticity", "compression_training", "data_efficiency", "amp", "sparse_attention",
                    "hybrid_engine", "compile", "timers", "tensor_parallel", "weight_quantization"})) {
      check_unread_block(value, name, r);
      r.unused(value, name, "accel has no equivalent of this DeepSpeed feature");
    }
    else r.unknown(key, name, k.tried());
  }
}

}  // namespace accel::config
