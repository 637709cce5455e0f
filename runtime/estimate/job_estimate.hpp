// A job's memory estimate: maps a JobConfig (model, world, precision, optimizer, offload keys) onto
// the estimator's input and a plan per strategy, so every strategy can be compared side by side
// with the job's own marked. Torch-free; `accel estimate-memory` renders it, and the trainer can
// print the configured row next to the measured peak.
// Invariant: strategies are listed in a fixed order (ddp / zero-0, zero-1, zero-2, zero-3,
// NO_SHARD, SHARD_GRAD_OP, FULL_SHARD, then HYBRID_SHARD when num_machines > 1) and exactly one of
// them is the job's own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/config/job.hpp"
#include "runtime/estimate/memory_estimate.hpp"

namespace accel::estimate {

struct JobEstimateOptions {
  int64_t params = 0;       // > 0: a bare parameter count replaces the job's model (units unknown)
  int64_t unit_params = 0;  // with params: the largest unit's size, for live buffers (0: not estimated)
  int world = 0;            // > 0: the world size instead of num_processes
};

// Activations are not estimated; this is the rough hint printed beside the table (gpt only):
// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", eq. 2:
// s*b*h*(34 + 5*a*s/h) bytes per layer with 16-bit activations, no recomputation, no tensor
// parallelism (s sequence length, b micro batch, h hidden size, a attention heads).
struct ActivationHint {
  bool available = false;
  int64_t seq_len = 0, micro_batch_size = 0, n_embd = 0, n_head = 0, n_layer = 0;
  // On a GPU (device cuda) the built-in attention is torch's fused kernel: no s x s scores are
  // kept, so a layer holds s*b*h*34 + 4*b*a*s bytes (its log-sum-exp) instead of eq. 2's.
  bool fused_attention = false;
  int64_t per_layer_bytes = 0;
  int64_t total_bytes = 0;  // per_layer_bytes * n_layer
  // fsdp.activation_checkpointing (docs/design/0010): each layer keeps only its input, 2*s*b*h bytes
  // (Korthikanti et al.'s full recomputation), and one layer's full activations exist during its
  // recompute: 2*s*b*h * n_layer + per_layer_bytes.
  bool recomputed = false;
  int64_t recomputed_total_bytes = 0;
};

struct JobEstimate {
  MemoryInput input;
  std::vector<std::string> unit_names;  // parallel to input.unit_numels
  std::string model;                    // "gpt (n_layer 4, ...)" or "a bare parameter count (--params; ...)"
  std::string precision;                // "bf16 parameters (mixed_precision bf16)"
  std::string optimizer;                // "adamw: 2 fp32 states per parameter"
  std::string device;                   // job.device: auto | cpu | cuda
  int world = 1, num_machines = 1;
  std::vector<MemoryEstimate> strategies;
  int configured = 0;                   // index into strategies
  std::string configured_label;         // "deepspeed zero_stage 3", "fsdp FULL_SHARD", "ddp"
  ActivationHint activations;
  // What the step replay counts besides the units' buffers (units known only): the tied matrix
  // (V x C), each layer's saved activations and the head's, in bytes.
  int64_t tied_weight_numel = 0;
  int64_t layer_activation_bytes = 0;
  int64_t head_activation_bytes = 0;
  std::vector<std::string> notes;       // assumptions and caveats, one sentence each
};

// Throws accel::UsageError for bad options (world < 1, params <= 0, a world not divisible by
// num_machines) and accel::ConfigError for a model section it cannot size.
JobEstimate estimate_job(const config::JobConfig& job, const JobEstimateOptions& options = {});

ActivationHint activation_hint(const config::JobConfig& job);

}  // namespace accel::estimate
