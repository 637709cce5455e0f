// The built-in trainer's loop on the public API (runtime/train/modules/api_training_loop.hpp) as a
// program, run through `accel launch` with `program:` by tests/numerics/test_builtin_on_api.py,
// which compares it with the built-in trainer on the same job.
#include <accel/accelerator.hpp>

#include <exception>
#include <iostream>

#include "runtime/train/modules/api_training_loop.hpp"
#include "runtime/worker/worker_context.hpp"

int main() {
  try {
    accel::Accelerator acc;
    const accel::config::LoadedJob job = accel::worker::load_launched_job();
    accel::train::run_builtin_training_on_api(acc, job.job);
  } catch (const std::exception& e) {
    std::cerr << "builtin_on_api_program: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
