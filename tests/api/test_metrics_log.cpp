// api::MetricsLog, the one metrics.jsonl writer: what a resumed run keeps under each step
// convention, that the kept prefix is staged beside the file and committed by a rename (the old
// file is whole until then), and appending after the truncation. The callers' line rules are
// tested with them (test_step_metrics.cpp, test_state_io.cpp).
#include "tests/support/catch_with_torch.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/metrics_log.hpp"
#include "tests/support/temp_dir.hpp"

using accel::api::MetricsLog;
using accel::api::ResumeKeeps;
using accel::test::read_file;

namespace {

// Lines "step N"; anything else has no step (dropped).
std::optional<int64_t> step_n(const std::string& line, int, bool) {
  if (line.rfind("step ", 0) != 0) return std::nullopt;
  return std::stoll(line.substr(5));
}

// The lines of steps `first` to `last`, each ending in '\n'.
std::string step_lines(int first, int last) {
  std::string text;
  for (int s = first; s <= last; ++s) text += "step " + std::to_string(s) + "\n";
  return text;
}

}  // namespace

TEST_CASE("metrics log: a resumed run keeps step < N (step indices) or step <= N (the caller's steps)",
          "[api][metrics]") {
  accel::test::TempDir dir;
  const std::string six = step_lines(0, 5);
  const std::string before = dir.write("before.jsonl", six), through = dir.write("through.jsonl", six);
  {
    MetricsLog log(before, 4, ResumeKeeps::steps_before, step_n);
    log.append("step 4");
  }
  CHECK(read_file(before) == step_lines(0, 4));
  {
    MetricsLog log(through, 4, ResumeKeeps::steps_through, step_n);
    log.append("step 5");
    log.append("step 6");
  }
  CHECK(read_file(through) == step_lines(0, 6));
  // Lines without a step go, the kept ones stay in file order.
  const std::string mixed = dir.write("mixed.jsonl", "step 3\nnoise\n\nstep 1\nstep 9\n");
  { MetricsLog log(mixed, 3, ResumeKeeps::steps_through, step_n); }
  CHECK(read_file(mixed) == "step 3\nstep 1\n");
}

TEST_CASE("metrics log: a fresh run starts empty without reading the file; a missing file is created",
          "[api][metrics]") {
  accel::test::TempDir dir;
  const std::string old = dir.write("old.jsonl", "not ours\n" + step_lines(0, 2));
  int calls = 0;
  auto counting = [&](const std::string& line, int n, bool last) {
    ++calls;
    return step_n(line, n, last);
  };
  {
    MetricsLog log(old, 0, ResumeKeeps::steps_before, counting);
    log.append("step 0");
  }
  CHECK(calls == 0);
  CHECK(read_file(old) == "step 0\n");
  const std::string missing = (dir.path() / "missing.jsonl").string();
  { MetricsLog log(missing, 3, ResumeKeeps::steps_through, counting); }
  CHECK(std::filesystem::exists(missing));
  CHECK(read_file(missing).empty());
}

TEST_CASE("metrics log: each line reaches the caller's rule with its number and whether it is the last",
          "[api][metrics]") {
  accel::test::TempDir dir;
  const std::string path = dir.write("m.jsonl", "step 0\n\nstep 1\n{\"step\": 2, \"lo");  // cut short
  std::vector<std::pair<int, bool>> seen;
  auto recording = [&](const std::string& line, int n, bool last) {
    seen.emplace_back(n, last);
    return step_n(line, n, last);
  };
  { MetricsLog log(path, 5, ResumeKeeps::steps_before, recording); }
  CHECK(seen == std::vector<std::pair<int, bool>>{{1, false}, {2, false}, {3, false}, {4, true}});
  CHECK(read_file(path) == step_lines(0, 1));
}

TEST_CASE("metrics log: the kept lines are staged beside the file and the rename commits them",
          "[api][metrics]") {
  accel::test::TempDir dir;
  const std::string original = step_lines(0, 5);
  const std::string path = dir.write("metrics.jsonl", original);
  const std::string staged = MetricsLog::staging_path(path);
  CHECK(std::filesystem::path(staged).parent_path() == std::filesystem::path(path).parent_path());

  // A process that dies after staging (before the rename) leaves the file as it was.
  MetricsLog::stage_kept_records(path, 3, ResumeKeeps::steps_before, step_n);
  CHECK(read_file(path) == original);
  CHECK(read_file(staged) == step_lines(0, 2));

  // A caller's rule that refuses the file stops the opening before the rename, too.
  auto refusing = [](const std::string& line, int n, bool last) -> std::optional<int64_t> {
    if (line == "step 4") throw std::runtime_error("not ours");
    return step_n(line, n, last);
  };
  CHECK_THROWS_WITH(MetricsLog(path, 3, ResumeKeeps::steps_before, refusing), "not ours");
  CHECK(read_file(path) == original);

  // The next opening replaces the stale staged file, renames it over the original and appends.
  {
    MetricsLog log(path, 1, ResumeKeeps::steps_through, step_n);
    CHECK_FALSE(std::filesystem::exists(staged));
    CHECK(read_file(path) == step_lines(0, 1));
    log.append("step 2");
    CHECK(read_file(path) == step_lines(0, 2));  // flushed at once
  }
  CHECK(read_file(path) == step_lines(0, 2));
}

ACCEL_ASSERT_CHECK_IS_CATCH();
