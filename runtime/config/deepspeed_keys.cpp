#include "runtime/config/deepspeed_keys.hpp"

#include <map>

namespace accel::config {

const std::vector<std::string>* deepspeed_section_keys(const std::string& section) {
  // Field names in the order DeepSpeed 0.19.8 declares them, each alias after its field.
  static const std::map<std::string, std::vector<std::string>> sections = {
    {"zero_optimization",
     {"stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size", "use_multi_rank_bucket_allreduce",
      "allgather_partitions", "allgather_bucket_size", "overlap_comm", "compute_grad_norm",
      "load_from_fp32_weights", "elastic_checkpoint", "offload_param", "offload_optimizer", "zenflow",
      "sub_group_size", "cpu_offload_param", "cpu_offload_use_pin_memory", "cpu_offload", "prefetch_bucket_size",
      "stage3_prefetch_bucket_size", "param_persistence_threshold", "stage3_param_persistence_threshold",
      "model_persistence_threshold", "stage3_model_persistence_threshold", "max_live_parameters",
      "stage3_max_live_parameters", "max_reuse_distance", "stage3_max_reuse_distance",
      "gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save",
      "module_granularity_threshold", "stage3_module_granularity_threshold", "use_all_reduce_for_fetch_params",
      "stage3_use_all_reduce_for_fetch_params", "allgather_sequential", "stage3_allgather_sequential",
      "stage3_gather_fp16_weights_on_model_save", "ignore_unused_parameters", "legacy_stage1",
      "round_robin_gradients", "parameter_alignment", "zero_hpz_partition_size", "zero_quantized_weights",
      "zero_quantized_nontrainable_weights", "zero_quantized_gradients", "memory_efficient_linear",
      "pipeline_loading_checkpoint", "override_module_apply", "log_trace_cache_warnings", "enable_sanity_checks",
      "save_muon_momentum_buffer_in_memory", "leaf_module"}},
    {"zero_optimization.offload_param",
     {"device", "nvme_path", "buffer_count", "buffer_size", "max_in_cpu", "pin_memory"}},
    {"zero_optimization.offload_optimizer",
     {"device", "nvme_path", "buffer_count", "pin_memory", "pipeline_read", "pipeline_write", "fast_init",
      "ratio", "super_offload", "cpuadam_cores_perc"}},
    {"zero_optimization.leaf_module",
     {"classes", "names", "name_suffixes"}},
    {"zero_optimization.zenflow",
     {"topk_ratio", "select_strategy", "select_interval", "update_interval", "overlap_step", "offload",
      "auto_ratio", "full_warm_up_rounds", "pt_reserved_cores_perc", "steps_per_epoch"}},
    {"fp16",
     {"enabled", "auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
      "consecutive_hysteresis", "min_loss_scale", "fp16_master_weights_and_grads"}},
    {"bf16",
     {"enabled", "immediate_grad_update", "check_grad_overflow", "bf16_master_weights_and_grads",
      "bf16_optimizer_states"}},
    {"tensorboard",
     {"enabled", "output_path", "job_name"}},
    {"wandb",
     {"enabled", "group", "team", "project"}},
    {"csv_monitor",
     {"enabled", "output_path", "job_name"}},
    {"comet",
     {"enabled", "samples_log_interval", "project", "workspace", "api_key", "experiment_name", "experiment_key",
      "online", "mode"}},
    {"comms_logger",
     {"enabled", "prof_all", "prof_ops", "verbose", "debug"}},
    {"hybrid_engine",
     {"enabled", "max_out_tokens", "inference_tp_size", "release_inference_cache", "pin_parameters",
      "tp_gather_partition_size", "enable_cuda_graph"}},
    {"compile",
     {"deepcompile", "autoep_non_moe", "free_activation", "free_activation_threshold", "offload_activation",
      "offload_activation_pin_memory", "offload_opt_states", "double_buffer", "symmetric_memory", "debug_log",
      "offload_parameters", "sync_before_reduce", "sync_after_reduce", "sync_before_allgather",
      "sync_after_allgather", "keep_int_input_tensors", "keep_all_input_tensors", "passes"}},
    {"timers.throughput",
     {"enabled", "synchronized"}},
    {"tensor_parallel",
     {"dtype", "autotp_size", "tp_overlap_comm", "vocab_parallel_lm_head", "vocab_parallel_ce_backend",
      "tensor_parallel", "tp", "injection_policy_tuple", "partition_config", "preset_model",
      "keep_module_on_host", "replace_with_kernel_inject", "kernel_inject"}},
    {"weight_quantization",
     {"enabled", "num_bits", "q_type", "q_groups", "quantized_initialization", "post_init_quant"}},
  };
  auto it = sections.find(section == "bfloat16" ? "bf16" : section);
  return it == sections.end() ? nullptr : &it->second;
}

}  // namespace accel::config
