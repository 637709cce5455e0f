// The state behind an accel::Accelerator (include/accel/accelerator.hpp keeps it opaque): the job
// and the world, the engine prepare() built, the micro-step machine, checkpoints and logs. Shared by
// accelerator.cpp and sharded_init.cpp (the construction scope keeps its slices here). Not installed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "accel/accelerator.hpp"
#include "api/construction_stash.hpp"
#include "api/host.hpp"
#include "api/metrics_log.hpp"
#include "api/state_io.hpp"
#include "api/torch_optimizer_groups.hpp"
#include "api/unit_sink.hpp"
#include "engine/backend.hpp"
#include "engine/grad_scaling.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/config/job_loader.hpp"
#include "runtime/tracking/trackers.hpp"
#include "runtime/worker/worker_context.hpp"

namespace accel {

struct Accelerator::State {
  config::LoadedJob job;
  std::optional<at::ScalarType> compute_dtype;  // the job's, resolved at first use
  // A worker `accel launch` started: the launcher's job, this rank's world and rendezvous.
  void join_launched_world();
  std::unique_ptr<worker::WorkerContext> ctx;   // under accel launch
  std::unique_ptr<comm::Communicator> single;   // run directly: a world of one
  comm::Communicator* comm = nullptr;
  comm::Rendezvous* rendezvous = nullptr;       // the launcher's store (null for a world of one)
  // accel's own trainer (api/host.hpp): its options, and where prepare() puts the engine. Its
  // Accelerator gives no hints meant for a user's program.
  std::shared_ptr<detail::Host> host;
  TrainingConfig training;
  UnitPolicy policy;
  bool policy_set = false;
  std::shared_ptr<api::ConstructionStash> stash;  // the slices an accel::ShardedInit scope kept
  std::shared_ptr<engine::UnitSource> loaded_weights;  // load_model()'s file, read in slices by prepare()

  torch::nn::Module* model = nullptr;
  api::TorchOptimizerKind kind = api::TorchOptimizerKind::adamw;
  std::unique_ptr<engine::Backend> backend;
  std::unique_ptr<PreparedOptimizer> prepared;
  engine::UnitHooks* hooks = nullptr;                // the open micro-step's (accel::Unit<> calls reach them)
  std::shared_ptr<detail::UnitSink> unit_sink;      // design B under stage 3 / FULL_SHARD; else none
  std::unique_ptr<engine::GradScaling> scaling;        // the loss scale under fp16; loss / G otherwise

  int64_t micro = 0;        // micro-steps whose backward ran
  bool open = false;        // a micro-step has begun and its backward has not run
  bool sync = false;        // the current (or last) micro-step synchronises
  bool sync_ready = false;  // a sync micro-step's gradients are reduced and wait for the step
  int64_t steps = 0;
  std::unique_ptr<api::MetricsLog> metrics;  // metrics.jsonl, opened by the first log()
  std::unique_ptr<tracking::Trackers> trackers;  // tracking.log_with, opened with metrics
  std::unique_ptr<api::StateIo> io;  // save_state / load_state (state_io.hpp), made at first use
  int64_t resumed_steps = 0;         // the steps load_state() restored
  // What print_progress() reports of the last optimizer step: its first group's lr, the scale its
  // loss was multiplied by, whether an fp16 overflow skipped it, the norm clip_grad_norm() returned.
  struct LastStep {
    double lr = 0, loss_scale = 1;
    bool skipped = false;
    std::optional<double> grad_norm;
  } last_step;
  std::optional<double> boundary_grad_norm;               // clip_grad_norm() at the open boundary
  std::chrono::steady_clock::time_point progress_since;   // prepare(), load_state() or the last line
  int64_t progress_lines = 0;                             // print_progress() calls so far

  api::StateIo& checkpoints() {
    if (!io) {
      io = std::make_unique<api::StateIo>(job, *comm, rendezvous);
      if (host && host->options.record_format) io->use_record_format(*host->options.record_format);
      if (host) host->checkpoints = io.get();
    }
    return *io;
  }
  api::LoopPosition position() const {
    return {steps, micro, open, sync_ready, accumulation(), scaling ? scaling->state() : nlohmann::json::object()};
  }

  int accumulation() const { return training.gradient_accumulation_steps; }
  engine::Backend& engine(const char* what) {
    if (!backend) throw RunError(std::string("accel: ") + what + " before prepare(model, optimizer)");
    return *backend;
  }
};

}  // namespace accel
