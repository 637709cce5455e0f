// Catch2's main for the tests labelled `gpu`: exits 77 (ctest's SKIP_RETURN_CODE: reported as
// skipped, never as passed) when this machine has no CUDA GPU, and runs the tests otherwise.
// Catch2's implementation: tests/catch_session.cpp (accel_catch_session).
#include <catch2/catch.hpp>

#include "tests/support/catch_session.hpp"

#include <torch/cuda.h>

#include <cstdio>

int main(int argc, char* argv[]) {
  if (!torch::cuda::is_available()) {
    std::printf("SKIPPED: no CUDA GPU on this machine (torch::cuda::is_available() is false)\n");
    return 77;
  }
  std::printf("%d CUDA GPU(s)\n", static_cast<int>(torch::cuda::device_count()));
  return accel::test::run_catch_session(argc, argv);
}
