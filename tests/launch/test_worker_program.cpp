// The launcher's side of accel-worker: finding the program (ACCEL_WORKER_PROGRAM, beside the
// executable) and running a helper to completion with its output captured (`accel env`).
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "runtime/common/errors.hpp"
#include "runtime/launch/captured_command.hpp"
#include "runtime/launch/worker_program.hpp"
#include "support/temp_dir.hpp"

using accel::launch::run_captured;

TEST_CASE("run_captured keeps stdout and stderr apart and reports the exit code") {
  auto r = run_captured({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, std::chrono::seconds(30));
  CHECK(r.exit_code == 3);
  CHECK_FALSE(r.timed_out);
  CHECK(r.out == "out\n");
  CHECK(r.err == "err\n");
}

TEST_CASE("run_captured kills a helper that outlives its timeout") {
  const auto start = std::chrono::steady_clock::now();
  auto r = run_captured({"/bin/sh", "-c", "echo started; exec sleep 30"}, std::chrono::milliseconds(300));
  CHECK(r.timed_out);
  CHECK(r.exit_code == -1);  // killed by a signal
  CHECK(r.out == "started\n");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(25));  // not the 30 s sleep
}

TEST_CASE("run_captured refuses a program that does not exist") {
  CHECK_THROWS_AS(run_captured({"/nonexistent/accel-worker", "facts"}, std::chrono::seconds(5)), accel::RunError);
}

TEST_CASE("worker_program_path takes ACCEL_WORKER_PROGRAM, and names a bad one") {
  accel::test::TempDir dir;
  const auto program = dir.path() / "my-worker";
  std::ofstream(program) << "#!/bin/sh\n";
  std::filesystem::permissions(program, std::filesystem::perms::owner_all);
  ::setenv(accel::launch::kWorkerProgramEnv, program.c_str(), 1);
  CHECK(accel::launch::worker_program_path() == program.string());
  ::setenv(accel::launch::kWorkerProgramEnv, "/nonexistent/accel-worker", 1);
  CHECK_THROWS_WITH(accel::launch::worker_program_path(), Catch::Contains("/nonexistent/accel-worker"));
  ::unsetenv(accel::launch::kWorkerProgramEnv);
  // Beside this test executable there is no accel-worker: the error names where it looked.
  CHECK_THROWS_WITH(accel::launch::worker_program_path(),
                    Catch::Contains("accel-worker was not found") && Catch::Contains("ACCEL_WORKER_PROGRAM"));
}
