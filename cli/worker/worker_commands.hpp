// The commands of accel-worker, the program that links libtorch. The launcher (`accel`) starts it;
// users never run it by hand. One file per command, as in cli/.
#pragma once

#include <CLI/CLI.hpp>

namespace accel::cli::worker_program {

// `run`: one rank of a job, the task named by ACCEL_WORKER_TASK (train, comm-test, comm-bench,
// launch-probe), under the environment the launcher set (runtime/launch/worker_env.hpp).
void add_run_command(CLI::App& app);
// `merge-weights CKPT --output FILE`: the work of `accel merge-weights`.
void add_merge_weights_command(CLI::App& app);
// `facts`: the torch facts of `accel env` as JSON on stdout (runtime/diag/torch_report.hpp).
void add_facts_command(CLI::App& app);

}  // namespace accel::cli::worker_program
