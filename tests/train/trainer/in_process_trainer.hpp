// The built-in trainer (run_training, trainer.hpp) on an in-process world: each rank a thread with
// its FakeWorld communicator, no launcher and no rendezvous store (nothing asked of these runs needs
// one: one machine's storage, synchronous checkpoints, none written). Rank 0's metrics.jsonl comes
// back, and with `trace` every rank's per-unit schedule (`accel launch --trace`). For trainer checks
// that must stay quick (the `quick` label); the launcher, Gloo and restarts are tested end to end
// in tests/numerics.
#pragma once

#include <algorithm>
#include <exception>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/comm/fake_communicator.hpp"
#include "runtime/config/job.hpp"
#include "runtime/worker/worker_context.hpp"
#include "tests/support/temp_dir.hpp"
#include "trainer/trainer.hpp"

namespace accel::test {

struct TrainerRun {
  std::vector<std::string> errors;        // one per rank, "" when it finished
  std::vector<nlohmann::json> steps;      // rank 0's metrics records, one per step
  std::vector<nlohmann::json> traces;     // each rank's trace events ("traceEvents"), when asked for
};

// The tiny GPT of tests/engine/tiny_job.hpp (2 layers, width 16, 32 ids, 8 positions) on the
// synthetic data, `steps` optimizer steps of `micro` rows x `accumulation` micro-steps per rank.
inline config::JobConfig tiny_trainer_job(int steps, int micro, int accumulation) {
  config::JobConfig job;
  job.model.n_layer = 2;
  job.model.n_head = 2;
  job.model.n_embd = 16;
  job.model.vocab_size = 32;
  job.model.block_size = 8;
  job.training.seq_len = 8;
  job.training.max_steps = steps;
  job.training.micro_batch_size = micro;
  job.training.gradient_accumulation_steps = accumulation;
  job.training.log_every = steps;  // one log line at each end
  return job;
}

// Runs `job` at `world` ranks (job.num_processes is set to it) in a fresh output directory.
inline TrainerRun run_trainer_in_process(config::JobConfig job, int world, bool trace = false) {
  TempDir dir;
  job.num_processes = world;
  job.training.output_dir = (dir.path() / "run").string();
  job.training.resume = "never";
  job.training.checkpoint_at_end = false;
  job.training.checkpoint_every = 0;
  job.training.save_weights = false;
  comm::FakeWorld fake(world);
  TrainerRun run;
  run.errors.assign(size_t(world), "");
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      try {
        worker::WorkerContext ctx;
        ctx.job.job = job;
        // job.num_machines "machines" of equal rank counts, as HYBRID_SHARD's groups take them.
        ctx.world.rank = r;
        ctx.world.world_size = world;
        ctx.world.local_world_size = world / std::max(1, job.num_machines);
        ctx.world.local_rank = r % ctx.world.local_world_size;
        ctx.world.machine_rank = r / ctx.world.local_world_size;
        ctx.communicator = fake.communicator(r);
        train::TrainerOptions options;
        if (trace) options.trace_path = (dir.path() / "trace.json").string();
        train::run_training(ctx, options);
      } catch (const std::exception& e) {
        run.errors[size_t(r)] = "rank " + std::to_string(r) + ": " + e.what();
      }
    });
  for (auto& t : ranks) t.join();
  std::ifstream metrics(job.training.output_dir + "/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);)
    if (!line.empty()) run.steps.push_back(nlohmann::json::parse(line));
  if (trace)
    for (int r = 0; r < world; ++r) {
      // Rank 0 writes trace.json, rank r trace.rank<r>.json (trainer.cpp's trace_file_for_rank).
      const std::string name = r == 0 ? "trace.json" : "trace.rank" + std::to_string(r) + ".json";
      std::ifstream in(dir.path() / name);
      run.traces.push_back(in ? nlohmann::json::parse(in).value("traceEvents", nlohmann::json::array())
                              : nlohmann::json::array());
    }
  return run;
}

}  // namespace accel::test
