// The typed job: one struct per YAML section, one member per key, defaults inline.
// Meaning, units, allowed values and ranges of every key live in one place, the schema table in
// schema_fields.cpp (`accel config keys` prints it; docs/config-reference.md is generated from it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/config/enums.hpp"

namespace accel::config {

struct DeepSpeedSection {
  int zero_stage = 2;
  OffloadDevice offload_optimizer_device = OffloadDevice::none;
  OffloadDevice offload_param_device = OffloadDevice::none;
  std::string offload_optimizer_nvme_path;
  std::string offload_param_nvme_path;
  int buffer_count = 5;
  bool pin_memory = true;
  std::string config_file;
  bool overlap_comm = true;
  int64_t reduce_bucket_size = 500'000'000;
  int64_t allgather_bucket_size = 500'000'000;
  int64_t stage3_prefetch_bucket_size = 50'000'000;
  int64_t stage3_param_persistence_threshold = 100'000;
  int64_t stage3_max_live_parameters = 1'000'000'000;
  int zero_hpz_partition_size = 1;
  bool zero3_init_flag = false;
  bool zero3_save_16bit_model = false;
  double loss_scale = 0.0;
  int initial_scale_power = 16;
  int loss_scale_window = 1000;
  int hysteresis = 2;
  double min_loss_scale = 1.0;
};

struct DdpSection {
  double bucket_cap_mb = 25.0;
};

struct FsdpSection {
  ShardingStrategy sharding_strategy = ShardingStrategy::FULL_SHARD;
  BackwardPrefetch backward_prefetch = BackwardPrefetch::BACKWARD_PRE;
  bool forward_prefetch = false;
  bool limit_all_gathers = true;
  bool offload_params = false;
  AutoWrapPolicy auto_wrap_policy = AutoWrapPolicy::TRANSFORMER_BASED_WRAP;
  std::string transformer_layer_cls_to_wrap = "Block";
  int64_t min_num_params = 100'000'000;
  StateDictType state_dict_type = StateDictType::FULL_STATE_DICT;
  bool sync_module_states = true;
  bool cpu_ram_efficient_loading = false;
  bool activation_checkpointing = false;
  PrecisionMode precision_mode = PrecisionMode::mixed;
};

struct ModelSection {
  ModelName name = ModelName::gpt;
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int vocab_size = 256;
  int block_size = 128;
  ParamDtype dtype = ParamDtype::fp32;
  // llama only (trainer/models/llama_module.hpp; docs/models.md). 0 for a size: derived (below).
  int n_kv_head = 0;           // key/value heads (grouped-query attention); 0: n_head
  int intermediate_size = 0;   // SwiGLU width; 0: 4 * n_embd
  int head_dim = 0;            // 0: n_embd / n_head
  double rope_theta = 10000.0;
  RopeScaling rope_scaling = RopeScaling::none;
  double rope_scaling_factor = 8.0;
  double rope_scaling_low_freq_factor = 1.0;
  double rope_scaling_high_freq_factor = 4.0;
  int rope_scaling_original_max_position_embeddings = 8192;
  double norm_eps = 1e-5;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  bool mlp_bias = false;
  int sliding_window = 0;  // Mistral's; 0: none. Accepted only where it masks nothing (seq_len <= it)
  // A Hugging Face model folder to start from; its config.json sets the shape keys (runtime/hf).
  std::string from_pretrained;
};

struct DataSection {
  DataKind kind = DataKind::synthetic;
  std::string path;
  DataOrder order = DataOrder::sequential;
  double val_fraction = 0.1;
  // Text through a Hugging Face tokenizer.json (docs/text-data.md); empty: byte-level text.
  std::string tokenizer;
  DataFormat format = DataFormat::text;
  std::string field = "text";
  std::string bos = "auto";
  std::string eos = "auto";
  std::string cache_dir;  // empty: $XDG_CACHE_HOME/accel/tokens (~/.cache/accel/tokens)
};

struct OptimizerSection {
  OptimizerName name = OptimizerName::adamw;
  double lr = 3.0e-4;
  double weight_decay = 0.1;
  std::vector<double> betas = {0.9, 0.95};
  double eps = 1.0e-8;
  double momentum = 0.9;
  // AdamW through torch's fused multi-tensor kernel (one launch per unit or group) or the
  // elementwise reference ops; auto: fused where the ranks compute on a GPU.
  FusedKernel fused = FusedKernel::auto_;
};

struct SchedulerSection {
  SchedulerName name = SchedulerName::cosine;
  int warmup_steps = 10;
  double min_lr_ratio = 0.1;
};

struct TrainingSection {
  int max_steps = 100;
  int micro_batch_size = 8;
  int gradient_accumulation_steps = 1;
  int seq_len = 128;
  double max_grad_norm = 1.0;
  int64_t seed = 1337;
  // The loss over the vocabulary in chunks of this many tokens (trainer/models/chunked_cross_entropy.hpp);
  // 0: the plain [tokens, vocab] fp32 path, whose rounding the reference scripts share.
  int64_t loss_chunk_tokens = 0;
  std::string output_dir = "runs/accel";
  int log_every = 1;
  int eval_every = 0;
  int checkpoint_every = 0;
  bool checkpoint_at_end = true;
  // Stage each checkpoint in host memory and write it on a background thread (docs/design/0028).
  bool async_checkpoint = false;
  std::string resume = "auto";
  std::string init_from;
  bool save_weights = true;
  // The end's weights export (docs/huggingface.md): accel's one safetensors file, or a Hugging Face
  // folder; the stored dtype; the largest shard of a folder, in bytes.
  ExportFormat export_format = ExportFormat::safetensors;
  ExportDtype export_dtype = ExportDtype::fp32;
  int64_t export_max_shard_size = 5'000'000'000;
};

// Trackers rank 0 writes beside metrics.jsonl (docs/design/0024); names as Accelerate's log_with.
struct TrackingSection {
  std::vector<std::string> log_with;  // tensorboard, mlflow, all; empty: none
  std::string project_name = "accel";  // the MLflow experiment's name
};

struct JobConfig {
  Backend backend = Backend::ddp;
  int num_processes = 1;
  int num_machines = 1;
  int min_machines = 0;  // elastic: fewest machines to run at (docs/design/0027); 0: fixed at num_machines
  int machine_rank = 0;
  std::string main_process_ip = "127.0.0.1";
  int main_process_port = 29500;
  Device device = Device::auto_;
  CudaCollectives cuda_collectives = CudaCollectives::nccl;  // gloo: host-staged, GPUs may be shared
  MixedPrecision mixed_precision = MixedPrecision::no;
  int max_restarts = 0;
  ElasticBatch elastic_batch = ElasticBatch::keep_global;  // what a smaller elastic world keeps
  double elastic_join_window_s = 10.0;                      // a restart round's wait for more machines
  int elastic_peer_timeout_s = 15;  // a launcher connection unanswered this long: its peer is lost
  RdzvBackend rdzv_backend = RdzvBackend::static_;  // who hosts an elastic job's rendezvous (docs/design/0034)
  std::string rdzv_endpoint;                        // etcd: host:port[,host:port...]
  int rdzv_lease_s = 5;                             // etcd: the host's lease TTL, how soon a lost host is replaced
  std::vector<std::string> program;
  int rendezvous_timeout_s = 300;
  int collective_timeout_s = 1800;  // 30 min: covers checkpoint writes between barriers (docs/design/0002)
  double shutdown_grace_s = 3.0;
  bool allow_unauthenticated = false;  // a multi-launcher job without ACCEL_SECRET_FILE runs (SECURITY.md)

  DdpSection ddp;
  DeepSpeedSection deepspeed;
  FsdpSection fsdp;
  ModelSection model;
  DataSection data;
  OptimizerSection optimizer;
  SchedulerSection scheduler;
  TrainingSection training;
  TrackingSection tracking;
};

}  // namespace accel::config
