// The schema table: every key of the job file with its documentation and constraints.
// KEY(a.b) expands to the path "a.b" and an accessor for JobConfig::a.b, so a key's spelling and
// the member it binds can never drift apart. Ranges here are per-key; checks that involve several
// keys live in validate.cpp.
#include <type_traits>

#include "runtime/config/plan/resolve_plan.hpp"
#include "runtime/config/schema.hpp"

namespace accel::config {
namespace {

template <class T, class = void>
struct Codec;
template <>
struct Codec<bool> {
  static constexpr FieldType type = FieldType::Bool;
  static Value to(bool v) { return v; }
  static bool from(const Value& v) { return std::get<bool>(v); }
};
template <>
struct Codec<int> {
  static constexpr FieldType type = FieldType::Int;
  static Value to(int v) { return static_cast<int64_t>(v); }
  static int from(const Value& v) { return static_cast<int>(std::get<int64_t>(v)); }
};
template <>
struct Codec<int64_t> {
  static constexpr FieldType type = FieldType::Int;
  static Value to(int64_t v) { return v; }
  static int64_t from(const Value& v) { return std::get<int64_t>(v); }
};
template <>
struct Codec<double> {
  static constexpr FieldType type = FieldType::Float;
  static Value to(double v) { return v; }
  static double from(const Value& v) { return std::get<double>(v); }
};
template <>
struct Codec<std::string> {
  static constexpr FieldType type = FieldType::String;
  static Value to(const std::string& v) { return v; }
  static std::string from(const Value& v) { return std::get<std::string>(v); }
};
template <>
struct Codec<std::vector<double>> {
  static constexpr FieldType type = FieldType::FloatList;
  static Value to(const std::vector<double>& v) { return v; }
  static std::vector<double> from(const Value& v) { return std::get<std::vector<double>>(v); }
};
template <>
struct Codec<std::vector<std::string>> {
  static constexpr FieldType type = FieldType::StringList;
  static Value to(const std::vector<std::string>& v) { return v; }
  static std::vector<std::string> from(const Value& v) { return std::get<std::vector<std::string>>(v); }
};
template <class E>
struct Codec<E, std::enable_if_t<std::is_enum_v<E>>> {
  static constexpr FieldType type = FieldType::Enum;
  static Value to(E v) { return to_string(v); }
  static E from(const Value& v) { return *enum_from_string<E>(std::get<std::string>(v)); }
};
// `backend:` is held by name and allowed when a dialect of that name is registered.
template <>
struct Codec<Backend> {
  static constexpr FieldType type = FieldType::Enum;
  static Value to(const Backend& v) { return v.name; }
  static Backend from(const Value& v) { return Backend{std::get<std::string>(v)}; }
};

// Fluent builder so each row of the table reads as one declaration.
struct Field {
  FieldSpec spec;
  Field& range(std::optional<double> lo, std::optional<double> hi = std::nullopt) {
    spec.min = lo;
    spec.max = hi;
    return *this;
  }
  // A file the job reads: relative paths written in a file resolve against that file's directory.
  Field& input_path() {
    spec.type = FieldType::Path;
    spec.relative_to_file = true;
    return *this;
  }
  // A place the job writes: relative paths resolve against the working directory.
  Field& output_path() {
    spec.type = FieldType::Path;
    return *this;
  }
  Field& below(double lo, double hi) {
    spec.min = lo;
    spec.max = hi;
    spec.max_exclusive = true;
    return *this;
  }
  // A list each of whose elements must be one of `names`.
  Field& one_of(std::vector<std::string> names, std::vector<std::string> not_built = {}) {
    spec.allowed = std::move(names);
    spec.not_built = std::move(not_built);
    return *this;
  }
  Field& size(size_t n) {
    spec.list_size = n;
    return *this;
  }
};

template <class Access>
Field field(const char* path, Access access, std::string doc) {
  using T = std::decay_t<decltype(access(std::declval<JobConfig&>()))>;
  Field f;
  f.spec.path = path;
  f.spec.type = Codec<T>::type;
  f.spec.doc = std::move(doc);
  f.spec.get = [access](const JobConfig& job) { return Codec<T>::to(access(const_cast<JobConfig&>(job))); };
  f.spec.set = [access](JobConfig& job, const Value& v) { access(job) = Codec<T>::from(v); };
  if constexpr (std::is_enum_v<T>) f.spec.allowed = enum_names<T>();
  if constexpr (std::is_same_v<T, Backend>) f.spec.allowed_from = plan::dialect_names;
  f.spec.int32 = std::is_same_v<T, int>;
  return f;
}

#define KEY(member) #member, [](JobConfig& j) -> auto& { return j.member; }

constexpr double kMaxPort = 65535;

std::vector<FieldSpec> build_schema() {
  std::vector<Field> rows = {
      // ---- the job as a whole ---------------------------------------------------------------
      field(KEY(backend), "Training semantics: ddp (replicated), deepspeed (ZeRO stages) or fsdp "
                          "(FSDP strategies). The one key that moves a job between DeepSpeed and FSDP."),
      field(KEY(num_processes), "Total worker processes across all machines (as in Accelerate); on device "
                                "cuda, when not set, one per GPU of each machine.").range(1, 4096),
      field(KEY(num_machines), "Number of machines the job spans. MIN:MAX (torchrun's --nnodes form, e.g. 1:2) "
                               "makes the job elastic: num_machines is MAX and min_machines MIN.")
          .range(1, 1024),
      field(KEY(min_machines), "Elastic jobs: the fewest machines the job runs on. When a machine is lost and "
                               "max_restarts allows, the others restart from the last checkpoint at the smaller "
                               "world (resharded), down to this many; a machine that comes back joins at the next "
                               "restart. Machine 0 hosts the rendezvous and must stay (rdzv_backend etcd lifts that). 0 (or num_machines): a "
                               "fixed world.")
          .range(0, 1024),
      field(KEY(machine_rank), "This machine's index, 0 .. num_machines-1. Machine 0 hosts the rendezvous.")
          .range(0),
      field(KEY(main_process_ip), "Address of machine 0, where the rendezvous store listens."),
      field(KEY(main_process_port), "Rendezvous port on machine 0; 0 picks a free port (single machine only).")
          .range(0, kMaxPort),
      field(KEY(device), "Where workers compute: auto (CUDA when present, else CPU), cpu, or cuda."),
      field(KEY(cuda_collectives), "How device cuda workers communicate: nccl (one process per GPU, collectives on "
                                   "the GPU), or gloo (each collective staged through host memory over Gloo: "
                                   "slow, but several processes may share a GPU, e.g. world 2 on one GPU to test "
                                   "sharding). CPU workers always use Gloo."),
      field(KEY(mixed_precision), "Compute precision: no (fp32), bf16, or fp16 (dynamic loss scaling). "
                                  "A bare `no` or `false` in YAML is read as no."),
      field(KEY(max_restarts), "Times the launcher restarts the whole worker group after a failure; 0 disables.")
          .range(0, 1000),
      field(KEY(elastic_batch), "Elastic jobs: what a world of fewer machines keeps. keep_global: the global batch "
                                "(gradient_accumulation_steps grows by num_machines / machines running, which must "
                                "come out whole; the run sees the same batches as at full size). keep_micro: the "
                                "micro batch and the accumulation (the global batch shrinks with the world)."),
      field(KEY(elastic_join_window_s), "Elastic jobs: once min_machines launchers have joined a start or restart "
                                        "round, seconds to wait for the others before the round starts without them.")
          .range(0, 3600),
      field(KEY(elastic_peer_timeout_s), "Elastic jobs: seconds a launcher's connection to the rendezvous host "
                                         "(and the host's to each launcher) may go unanswered before the other "
                                         "side is taken for lost: a machine that lost power or is cut off. The host "
                                         "then goes on without that machine; a launcher that lost its host exits "
                                         "(rdzv_backend static) or asks etcd who hosts now. Longer rides out longer "
                                         "network outages (a machine cut off for less rejoins at the next restart); "
                                         "shorter notices a dead machine sooner.")
          .range(2, 3600),
      field(KEY(rdzv_backend), "Elastic jobs: where the launchers' rendezvous lives. static: machine 0's launcher "
                               "hosts it, and losing machine 0 ends the job. etcd: the etcd cluster at "
                               "rdzv_endpoint holds who hosts it, under leases; when that machine is lost the "
                               "survivors elect another, which hosts the rendezvous and the store, and the job "
                               "resumes from the last checkpoint (docs/design/0034)."),
      field(KEY(rdzv_endpoint), "rdzv_backend etcd: the etcd cluster's client addresses, host:port[,host:port...] "
                                "(plain http), e.g. 10.0.0.5:2379,10.0.0.6:2379,10.0.0.7:2379."),
      field(KEY(rdzv_lease_s), "rdzv_backend etcd: seconds of the lease the host's key lives under, renewed every "
                               "third of it. A lost host is replaced after at most this (plus "
                               "elastic_join_window_s); a host whose renewals stall this long (etcd slow or "
                               "without quorum) ends the job. Below etcd's shortest lease (1.5 election "
                               "timeouts: 2 s for etcd's defaults) the launch is refused.")
          .range(1, 600),
      field(KEY(program), "Run this program (and arguments) as each worker instead of accel's built-in trainer, "
                          "e.g. [./my_trainer, --lr, \"3e-4\"]. It receives the launch environment (RANK, "
                          "WORLD_SIZE, MASTER_ADDR, ACCEL_JOB, ...). A relative path resolves against the job file's directory "
                          "(as data.path does; on the command line, against the working directory), a bare name "
                          "on PATH. Empty: the built-in trainer."),
      field(KEY(rendezvous_timeout_s), "Seconds workers wait for every rank to arrive before failing with the "
                                       "list of missing ranks.")
          .range(1, 86400),
      field(KEY(collective_timeout_s), "Seconds a collective may wait for its peers before it fails naming the op; "
                                       "a rank that hangs then ends the job within this plus shutdown_grace_s "
                                       "(one that dies ends it at once). It must outlast the longest gap between "
                                       "collectives: a checkpoint write (ranks wait at a barrier for the slowest "
                                       "writer), evaluation, the first step. 1800 (30 min) as torch's Gloo, "
                                       "DeepSpeed and Accelerate; lower it to catch hangs sooner when checkpoints "
                                       "take seconds.")
          .range(1, 86400),
      field(KEY(shutdown_grace_s), "After a failure or a signal, seconds between SIGTERM and SIGKILL for the "
                                   "remaining workers.")
          .range(0, 600),
      field(KEY(allow_unauthenticated), "A job spread over several launchers (num_machines > 1, or srun/mpirun "
                                        "with one task per process) needs the job secret file ACCEL_SECRET_FILE and "
                                        "is refused without it. true runs it unauthenticated instead, with a "
                                        "warning: only on a network no one else can reach (SECURITY.md)."),

      // ---- ddp: replicated data parallel (PyTorch DDP semantics) ----------------------------
      field(KEY(ddp.bucket_cap_mb), "Gradient all-reduce bucket size in MiB (PyTorch DDP's bucket_cap_mb); a bucket "
                                    "is reduced as soon as all its gradients are ready during backward.")
          .range(0.001, 65536),

      // ---- deepspeed: ZeRO semantics, names as in Accelerate / DeepSpeed --------------------
      field(KEY(deepspeed.zero_stage), "ZeRO stage: 0 replicates everything; 1 partitions optimizer states and "
                                       "fp32 master weights; 2 also gradients; 3 also parameters.")
          .range(0, 3),
      field(KEY(deepspeed.offload_optimizer_device), "Where the optimizer step, fp32 master weights and states "
                                                     "live: none (on the compute device), cpu, or nvme (files). "
                                                     "Needs zero_stage >= 1."),
      field(KEY(deepspeed.offload_param_device), "Where parameter shards live between uses: none, cpu, or nvme. "
                                                 "Needs zero_stage 3."),
      field(KEY(deepspeed.offload_optimizer_nvme_path), "Directory for optimizer-state files when "
                                                        "offload_optimizer_device is nvme; created if missing.")
          .output_path(),
      field(KEY(deepspeed.offload_param_nvme_path), "Directory for parameter files when offload_param_device is "
                                                    "nvme; created if missing.")
          .output_path(),
      field(KEY(deepspeed.buffer_count), "Number of staging buffers that stream NVMe-offloaded tensors.")
          .range(1, 64),
      field(KEY(deepspeed.pin_memory), "Use page-locked host memory for offloaded tensors (GPU runs only)."),
      field(KEY(deepspeed.config_file), "A DeepSpeed JSON config whose values fill keys this job leaves at "
                                        "their defaults; \"auto\" entries keep accel's value. Relative paths "
                                        "resolve against the job file's directory.")
          .input_path(),
      field(KEY(deepspeed.overlap_comm), "Overlap gradient reduction and parameter gathering with compute. "
                                         "DeepSpeed defaults to false for stages 1-2 and true for 3; accel "
                                         "overlaps whenever it can, set false to serialise."),
      field(KEY(deepspeed.reduce_bucket_size), "Elements per gradient reduction bucket.").range(1),
      field(KEY(deepspeed.allgather_bucket_size), "Elements per parameter all-gather bucket (stages 1-2).").range(1),
      field(KEY(deepspeed.stage3_prefetch_bucket_size), "Elements of parameters prefetched ahead of use "
                                                        "(stage 3); 0 disables prefetch.")
          .range(0),
      field(KEY(deepspeed.stage3_param_persistence_threshold), "Parameters with fewer elements than this stay "
                                                               "unpartitioned (stage 3); 0 partitions all.")
          .range(0),
      field(KEY(deepspeed.stage3_max_live_parameters), "Upper bound on gathered parameter elements alive at once "
                                                       "(stage 3).")
          .range(1),
      field(KEY(deepspeed.zero_hpz_partition_size), "ZeRO++ hierarchical partitioning: secondary parameter "
                                                    "partition size (ranks per machine); 1 disables. The "
                                                    "DeepSpeed analogue of FSDP HYBRID_SHARD.")
          .range(1),
      field(KEY(deepspeed.zero3_init_flag), "Build the model directly in partitioned form (saves host memory "
                                            "for large models)."),
      field(KEY(deepspeed.zero3_save_16bit_model), "Gather a full 16-bit model when saving under stage 3 "
                                                   "(FSDP's FULL_STATE_DICT)."),
      field(KEY(deepspeed.loss_scale), "fp16 static loss scale; 0 selects dynamic loss scaling.").range(0),
      field(KEY(deepspeed.initial_scale_power), "fp16 dynamic loss scaling starts at 2^initial_scale_power.")
          .range(0, 64),
      field(KEY(deepspeed.loss_scale_window), "fp16: steps without overflow before the loss scale doubles.")
          .range(1),
      field(KEY(deepspeed.hysteresis), "fp16: overflows tolerated before the loss scale is lowered.").range(1),
      field(KEY(deepspeed.min_loss_scale), "fp16: the loss scale never drops below this.").range(0),

      // ---- fsdp: PyTorch FSDP semantics, names as in Accelerate's fsdp_config ----------------
      field(KEY(fsdp.sharding_strategy), "FULL_SHARD shards parameters, gradients and optimizer states (ZeRO-3); "
                                         "SHARD_GRAD_OP keeps parameters gathered between forward and backward "
                                         "(ZeRO-2); NO_SHARD replicates (DDP); HYBRID_SHARD shards within a "
                                         "machine and replicates across machines."),
      field(KEY(fsdp.backward_prefetch), "When the next unit's parameters are gathered during backward: before "
                                         "the current unit's gradient computation (BACKWARD_PRE), after it "
                                         "(BACKWARD_POST), or not ahead of time (NO_PREFETCH)."),
      field(KEY(fsdp.forward_prefetch), "Gather the next unit's parameters while the current unit runs forward."),
      field(KEY(fsdp.limit_all_gathers), "Keep at most two units' gathered parameters alive (bounds memory)."),
      field(KEY(fsdp.offload_params), "Keep parameters and gradients on the CPU and run the optimizer step there."),
      field(KEY(fsdp.auto_wrap_policy), "How the model is split into units: one per transformer layer class "
                                        "(TRANSFORMER_BASED_WRAP), by parameter count (SIZE_BASED_WRAP), or the "
                                        "whole model as one unit (NO_WRAP)."),
      field(KEY(fsdp.transformer_layer_cls_to_wrap), "Comma-separated unit class names for TRANSFORMER_BASED_WRAP "
                                                     "(the gpt model's layer class is Block)."),
      field(KEY(fsdp.min_num_params), "SIZE_BASED_WRAP: a unit closes once it holds this many parameters.").range(1),
      field(KEY(fsdp.state_dict_type), "Checkpoint layout: FULL_STATE_DICT (one full copy written by rank 0) or "
                                       "SHARDED_STATE_DICT (each rank writes its shard)."),
      field(KEY(fsdp.sync_module_states), "Broadcast rank 0's initial parameters so every rank starts equal."),
      field(KEY(fsdp.cpu_ram_efficient_loading), "Only rank 0 materialises full weights at load; others receive "
                                                 "shards (Accelerate's name; DeepSpeed's zero3_init_flag)."),
      field(KEY(fsdp.activation_checkpointing), "Store only each layer unit's input (gpt Blocks, mlp layers) and "
                                                "recompute its activations in backward: much less activation "
                                                "memory for about one more forward per step."),
      field(KEY(fsdp.precision_mode), "With a model loaded in bf16: mixed upcasts the sharded parameters to fp32 "
                                      "for the optimizer (Accelerate's default); low keeps parameters, master "
                                      "shards and gradients in bf16 (AdamW moments stay fp32)."),

      // ---- model -----------------------------------------------------------------------------
      field(KEY(model.name), "Built-in model: gpt (GPT-2 architecture, see spec/training.md), llama (Llama 2/3, "
                             "Mistral, TinyLlama, Granite shapes; docs/models.md) or mlp (small tests)."),
      field(KEY(model.n_layer), "Transformer blocks (gpt), decoder layers (llama) or hidden layers (mlp).").range(1, 1024),
      field(KEY(model.n_head), "Attention heads; must divide n_embd (llama: unless head_dim is set).").range(1, 1024),
      field(KEY(model.n_embd), "Embedding width.").range(1, 1 << 20),
      field(KEY(model.vocab_size), "Token vocabulary size; byte-level text needs at least 256.").range(2, 1 << 24),
      field(KEY(model.block_size), "Maximum sequence length (rows of the position embedding).").range(1, 1 << 20),
      field(KEY(model.dtype), "The dtype parameters are loaded in: fp32 or bf16."),
      field(KEY(model.n_kv_head), "llama: key/value heads (grouped-query attention; must divide n_head); 0: n_head.")
          .range(0, 1024),
      field(KEY(model.intermediate_size), "llama: width of the SwiGLU MLP (gate_proj, up_proj); 0: 4 * n_embd.")
          .range(0, 1 << 22),
      field(KEY(model.head_dim), "llama: channels per attention head, even (RoPE rotates pairs); 0: n_embd / n_head.")
          .range(0, 1 << 16),
      field(KEY(model.rope_theta), "llama: RoPE base (10000 Llama 2, 500000 Llama 3, 1000000 Mistral v0.2+).")
          .range(0),
      field(KEY(model.rope_scaling), "llama: RoPE frequency scaling: none, or llama3 (Llama 3.1's, with the "
                                     "rope_scaling_* keys; transformers' rope_type llama3)."),
      field(KEY(model.rope_scaling_factor), "llama3 rope scaling: factor the low frequencies are divided by.")
          .range(1),
      field(KEY(model.rope_scaling_low_freq_factor), "llama3 rope scaling: low_freq_factor.").range(0),
      field(KEY(model.rope_scaling_high_freq_factor), "llama3 rope scaling: high_freq_factor (above "
                                                      "low_freq_factor).")
          .range(0),
      field(KEY(model.rope_scaling_original_max_position_embeddings), "llama3 rope scaling: the context length "
                                                                      "the model was pre-trained at.")
          .range(1, 1 << 24),
      field(KEY(model.norm_eps), "llama: RMSNorm epsilon (transformers' rms_norm_eps).").range(0),
      field(KEY(model.tie_word_embeddings), "llama: logits through embed_tokens (no lm_head parameter); gpt is "
                                            "always tied."),
      field(KEY(model.attention_bias), "llama: biases on q_proj, k_proj, v_proj and o_proj."),
      field(KEY(model.mlp_bias), "llama: biases on gate_proj, up_proj and down_proj."),
      field(KEY(model.sliding_window), "llama: Mistral's sliding-window attention span; not implemented, so "
                                       "accepted only when training.seq_len is within it (it masks nothing); "
                                       "0: none.")
          .range(0, 1 << 24),
      field(KEY(model.from_pretrained), "A Hugging Face model folder to start from (config.json, model.safetensors or "
                                        "model.safetensors.index.json with shards; fp32, bf16 or fp16): its "
                                        "config.json fills the shape keys the job leaves unset (a set one that "
                                        "disagrees is an error); each rank reads only the slices it keeps. "
                                        "Architectures: GPT2LMHeadModel (model.name gpt).")
          .input_path(),

      // ---- data ------------------------------------------------------------------------------
      field(KEY(data.kind), "synthetic (built in, no file), text (a file tokenised at byte level, vocab 256), or "
                            "tokens (an llm.c .bin token file)."),
      field(KEY(data.path), "The text or token file for kind text/tokens. Relative paths resolve against the "
                            "job file's directory.")
          .input_path(),
      field(KEY(data.order), "sequential (the reference order of spec/training.md) or shuffled (seeded)."),
      field(KEY(data.val_fraction), "Fraction of the data's windows held out, at its end, for evaluation loss; 0 "
                                    "disables evaluation.")
          .below(0, 1),
      field(KEY(data.tokenizer), "A Hugging Face tokenizer.json for data.kind text (byte-level BPE as GPT-2 and "
                                 "Llama 3, SentencePiece-style BPE as Llama 2 and Mistral); empty: bytes, vocab 256. "
                                 "See docs/text-data.md.")
          .input_path(),
      field(KEY(data.format), "With data.tokenizer: text (one document per line) or jsonl (one JSON object per line, "
                              "the document in data.field)."),
      field(KEY(data.field), "The jsonl field holding each document's text."),
      field(KEY(data.bos), "Token put before each document: auto (the tokenizer's, from tokenizer_config.json beside "
                           "it or a well-known added token), none, or the token's text."),
      field(KEY(data.eos), "Token put after each document: auto (as data.bos), none, or the token's text. When bos "
                           "and eos are the same token (GPT-2), only eos separates documents."),
      field(KEY(data.cache_dir), "Where tokenized data is cached (memory-mapped, keyed by the data's and the "
                                 "tokenizer's hashes, built once and reused); empty: $XDG_CACHE_HOME/accel/tokens "
                                 "or ~/.cache/accel/tokens.")
          .output_path(),

      // ---- optimizer -------------------------------------------------------------------------
      field(KEY(optimizer.name), "adamw (torch.optim.AdamW semantics, decay on 2-D parameters only) or sgd "
                                 "(with momentum)."),
      field(KEY(optimizer.lr), "Peak learning rate.").range(0),
      field(KEY(optimizer.weight_decay), "Weight decay on 2-D parameters only: decoupled for adamw (p *= 1 - lr*wd), "
                                         "L2 added to the gradient for sgd (torch.optim semantics); 0 disables.")
          .range(0),
      field(KEY(optimizer.betas), "AdamW beta1 and beta2, each in [0, 1).").below(0, 1).size(2),
      field(KEY(optimizer.eps), "AdamW denominator epsilon.").range(0),
      field(KEY(optimizer.momentum), "SGD momentum; 0 disables.").range(0, 1),
      field(KEY(optimizer.fused), "AdamW kernel: true (torch's fused multi-tensor AdamW, one launch per unit; within "
                                  "an ulp or so per step of the reference), false (the elementwise ops of "
                                  "spec/training.md, bit-for-bit with torch.optim.AdamW) or auto (fused on a GPU, "
                                  "elementwise on the CPU)."),

      // ---- scheduler -------------------------------------------------------------------------
      field(KEY(scheduler.name), "cosine (decay to min_lr_ratio*lr after warmup) or constant (lr after warmup)."),
      field(KEY(scheduler.warmup_steps), "Linear warmup steps; 0 disables.").range(0),
      field(KEY(scheduler.min_lr_ratio), "Cosine floor as a fraction of lr.").range(0, 1),

      // ---- training --------------------------------------------------------------------------
      field(KEY(training.max_steps), "Optimizer steps to train.").range(1),
      field(KEY(training.micro_batch_size), "Sequences per rank per micro-step.").range(1),
      field(KEY(training.gradient_accumulation_steps), "Micro-steps per optimizer step.").range(1),
      field(KEY(training.seq_len), "Tokens per sequence; at most model.block_size.").range(1),
      field(KEY(training.max_grad_norm), "Clip the global gradient L2 norm to this; 0 disables clipping.").range(0),
      field(KEY(training.seed), "Seed for initialisation, shuffling and synthetic data.").range(0),
      field(KEY(training.loss_chunk_tokens), "The built-in models' head and cross-entropy over chunks of this many "
                                             "tokens: no [tokens, vocab] fp32 logits, no [V, C] transients of a tied "
                                             "embedding but its gradient; equal to the plain loss up to summation "
                                             "order (docs/models.md). 0: the plain path (all tokens' fp32 logits at "
                                             "once).")
          .range(0),
      field(KEY(training.output_dir), "Where metrics.jsonl, logs/ and checkpoints/ go. Relative paths resolve "
                                      "against the working directory.")
          .output_path(),
      field(KEY(training.log_every), "Print a log line every N steps.").range(1),
      field(KEY(training.eval_every), "Evaluate on the held-out split every N steps; 0 disables.").range(0),
      field(KEY(training.checkpoint_every), "Checkpoint every N steps; 0 checkpoints only at the end.").range(0),
      field(KEY(training.async_checkpoint), "Write checkpoints in the background: a save copies this rank's state "
                                            "into host memory while the next step runs and returns; a background "
                                            "thread writes, hashes and commits it, and `latest` moves once every "
                                            "rank's files are written. The next save waits for the previous one. "
                                            "Costs a second copy of the rank's saved state in host memory. false: "
                                            "each save returns once committed."),
      field(KEY(training.checkpoint_at_end), "Checkpoint after the last step too. false: only every checkpoint_every "
                                             "steps (a benchmark, or a run kept by its exported weights)."),
      field(KEY(training.resume), "auto (continue from the latest checkpoint in output_dir if any), never, or "
                                  "the path of a checkpoint directory."),
      field(KEY(training.init_from), "Optional safetensors file with full weights to start from.").input_path(),
      field(KEY(training.save_weights), "Write the full, unsharded weights at the end, as export_format says."),
      field(KEY(training.export_format), "The end's weights: safetensors (<output_dir>/weights.safetensors under "
                                         "accel's names) or hf (a Hugging Face folder <output_dir>/hf that "
                                         "transformers' from_pretrained loads: config.json, safetensors shards and "
                                         "an index). Written one unit at a time."),
      field(KEY(training.export_dtype), "The dtype the export stores: fp32, bf16 or fp16 (from the fp32 weights)."),
      field(KEY(training.export_max_shard_size), "export_format hf: the largest safetensors shard in bytes "
                                                 "(transformers' max_shard_size); a model above it is split with "
                                                 "model.safetensors.index.json.")
          .range(1),

      // ---- tracking: trackers rank 0 writes, names as Accelerate's log_with ------------------
      field(KEY(tracking.log_with), "Trackers that get each step's metrics and the resolved job as "
                                    "hyper-parameters, written by rank 0 into output_dir: tensorboard (event "
                                    "files in tensorboard/), mlflow (a file store in mlruns/), all (both). "
                                    "acc.log() writes to them too. Empty: none.")
          .one_of({"tensorboard", "mlflow", "all"},
                  {"wandb", "comet_ml", "aim", "clearml", "dvclive", "swanlab", "trackio"}),
      field(KEY(tracking.project_name), "The MLflow experiment the run is filed under (Accelerate's "
                                        "init_trackers project_name); the run is named after output_dir."),
  };

  std::vector<FieldSpec> specs;
  for (auto& row : rows) specs.push_back(std::move(row.spec));

  // DeepSpeed spells two training keys its own way; accept them as aliases (DeepSpeed users write them
  // inside the deepspeed block). Writing an alias writes the training key.
  auto alias = [&specs](const char* path, const char* target) {
    const FieldSpec* t = nullptr;
    for (const auto& s : specs)
      if (s.path == target) t = &s;
    FieldSpec a = *t;
    a.path = path;
    a.alias_of = target;
    a.doc = std::string("DeepSpeed's name for ") + target + "; setting it sets that key.";
    specs.push_back(std::move(a));
  };
  alias("deepspeed.gradient_clipping", "training.max_grad_norm");
  alias("deepspeed.gradient_accumulation_steps", "training.gradient_accumulation_steps");
  return specs;
}

#undef KEY

}  // namespace

const std::vector<FieldSpec>& schema() {
  static const std::vector<FieldSpec> table = build_schema();
  return table;
}

}  // namespace accel::config
