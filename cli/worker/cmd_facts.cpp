// `accel-worker facts`: libtorch's, the GPUs' and the BLAS's facts as JSON, for `accel env`.
#include <iostream>

#include "cli/worker/worker_commands.hpp"
#include "runtime/comm/cuda_plugin.hpp"
#include "runtime/diag/torch_report.hpp"

namespace accel::cli::worker_program {

void add_facts_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("facts", "Print libtorch, GPU and BLAS facts as JSON (what `accel env` shows)");
  cmd->callback([] {
    // The CUDA facts come from libtorch_cuda, which only accel's CUDA plugin brings into a process.
    std::string why;
    const bool loaded = comm::load_cuda_plugin(&why) != nullptr;
    auto report = diag::collect_torch_report();
    report["torch"]["cuda_plugin"] = loaded ? std::string("loaded (") + comm::kCudaPluginFile + ")" : why;
    std::cout << report.dump() << "\n";
  });
}

}  // namespace accel::cli::worker_program
