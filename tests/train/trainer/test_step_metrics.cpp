// metrics.jsonl on resume, the step log line, and ACCEL_FAULT parsing.
#include "tests/support/catch_with_torch.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tests/support/temp_dir.hpp"
#include "trainer/fault_injection.hpp"
#include "trainer/step_metrics.hpp"

using accel::train::FaultInjector;
using accel::train::MetricsFile;
using accel::train::StepMetrics;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

StepMetrics record(int64_t step) {
  StepMetrics m;
  m.step = step;
  m.loss = 5.0 - 0.1 * double(step);
  m.lr = 1e-3;
  m.grad_norm = 0.5;
  m.tokens = 1024;
  m.step_time_s = 0.01;
  m.tokens_per_s = 102400;
  m.peak_mem_bytes = 1 << 20;
  return m;
}

}  // namespace

TEST_CASE("metrics.jsonl: a resumed run keeps the records before its start step only", "[trainer][metrics]") {
  accel::test::TempDir dir;
  std::string path = (dir.path() / "metrics.jsonl").string();
  {
    MetricsFile f(path, 0);
    for (int s = 0; s < 6; ++s) f.append(record(s));
  }
  {
    MetricsFile f(path, 4);  // resumed from a checkpoint holding 4 steps
    f.append(record(4));
  }
  std::istringstream lines(read_all(path));
  std::string line;
  std::vector<int64_t> steps;
  while (std::getline(lines, line)) steps.push_back(nlohmann::json::parse(line).at("step").get<int64_t>());
  CHECK(steps == std::vector<int64_t>{0, 1, 2, 3, 4});
  // A fresh run (keep_before 0) starts empty.
  { MetricsFile f(path, 0); }
  CHECK(read_all(path).empty());
}

TEST_CASE("metrics.jsonl: a line cut short by a crash is dropped, other garbage is an error", "[trainer][metrics]") {
  accel::test::TempDir dir;
  std::string path = dir.write("metrics.jsonl", to_json(record(0)).dump() + "\n" + to_json(record(1)).dump() +
                                                    "\n{\"step\": 2, \"lo");
  { MetricsFile f(path, 5); }
  CHECK(read_all(path) == to_json(record(0)).dump() + "\n" + to_json(record(1)).dump() + "\n");
  std::string bad = dir.write("other.jsonl", "hello\n" + to_json(record(0)).dump() + "\n");
  CHECK_THROWS_WITH(MetricsFile(bad, 3), Catch::Matchers::Contains("other.jsonl:1: not a metrics record"));
}

TEST_CASE("the trackers get each field of the record under its tag, the optional ones when present", "[trainer][metrics]") {
  using Scalars = std::vector<std::pair<std::string, double>>;
  StepMetrics m = record(3);
  m.comm_bytes = 4096;
  CHECK(accel::train::tracker_scalars(m) == Scalars{{"train/loss", 4.7}, {"train/lr", 1e-3}, {"train/grad_norm", 0.5},
                                                    {"perf/tokens_per_s", 102400}, {"perf/step_time_s", 0.01},
                                                    {"perf/peak_mem_bytes", 1 << 20}, {"perf/comm_bytes", 4096}});
  CHECK(to_json(m)["comm_bytes"] == 4096.0);
  m.eval_loss = 3.25;
  m.loss_scale = 65536;
  const Scalars all = accel::train::tracker_scalars(m);
  CHECK(all[3] == std::pair<std::string, double>{"train/loss_scale", 65536});
  CHECK(all[4] == std::pair<std::string, double>{"eval/loss", 3.25});
  CHECK(all.size() == 9);
}

TEST_CASE("the step line carries every metric; the progress bar only when asked", "[trainer][metrics]") {
  StepMetrics m = record(11);
  m.eval_loss = 3.25;
  std::string plain = accel::train::format_step_line(m, 60, false);
  CHECK(plain == "step 12/60 | loss 3.9000 | lr 1.00e-03 | grad_norm 0.500 | 102.4k tok/s | 10.0 ms | peak 1.00 MiB | "
                 "eval_loss 3.2500");
  std::string bar = accel::train::format_step_line(m, 60, true);
  CHECK(bar.rfind("[####................]  20% step 12/60", 0) == 0);
}

TEST_CASE("ACCEL_FAULT: malformed values are refused, other ranks and later attempts are not armed", "[trainer][fault]") {
  setenv("ACCEL_FAULT", "1:bogus:3", 1);
  CHECK_THROWS_WITH(FaultInjector(1), Catch::Matchers::Contains(
                                           "expected <rank>:<after_step|checkpoint_write|checkpoint_background_write|die_in_collective|hang_in_collective|"
                                           "slow_collective|skip_collective|other_op_in_collective|"
                                           "other_size_in_collective>:<step>"));
  setenv("ACCEL_FAULT", "x:after_step:3", 1);
  CHECK_THROWS_WITH(FaultInjector(1), Catch::Matchers::Contains("must be integers"));
  // Armed for rank 1 only: rank 0 passes the point (a kill would end this test process).
  setenv("ACCEL_FAULT", "1:after_step:3", 1);
  FaultInjector(0).at("after_step", 3);
  setenv("ACCEL_RESTART_COUNT", "1", 1);
  FaultInjector(1).at("after_step", 3);  // a restarted attempt runs through
  unsetenv("ACCEL_RESTART_COUNT");
  unsetenv("ACCEL_FAULT");
  FaultInjector(1).at("after_step", 3);
  SUCCEED("no fault fired where none was armed");
}

ACCEL_ASSERT_CHECK_IS_CATCH();
