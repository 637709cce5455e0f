// The progress of long work (runtime/common/progress.hpp): what each display prints, captured.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/common/progress.hpp"

using accel::progress::Display;
using accel::progress::Output;
using accel::progress::Task;

namespace {

struct Captured {
  std::vector<std::string> lines, draws;
  Output output() {
    return {[this](const std::string& s) { lines.push_back(s); }, [this](const std::string& s) { draws.push_back(s); }};
  }
};

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

TEST_CASE("progress: without a terminal, a start line and an end line with the time, whatever the work") {
  Captured c;
  {
    Task task("evaluation at step 50", true, Display::lines, c.output());
    task.set_total(400, "batches");
    for (int i = 0; i < 400; ++i) task.advance();
    task.set_stage("reducing");
    task.finish();
  }
  REQUIRE(c.lines.size() == 2);
  CHECK(c.lines[0] == "evaluation at step 50 ...");
  CHECK(starts_with(c.lines[1], "evaluation at step 50 took "));
  CHECK(c.lines[1].find(" s (400 batches)") != std::string::npos);
  CHECK(c.draws.empty());
}

TEST_CASE("progress: bytes and files written under a task count toward it and end in its line") {
  Captured c;
  Task task("checkpoint step_00000020", true, Display::lines, c.output());
  accel::progress::bytes_written(3 << 20);
  accel::progress::file_written();
  accel::progress::bytes_written(1 << 20);
  accel::progress::file_written();
  CHECK(task.bytes_written() == uint64_t(4) << 20);
  CHECK(task.files_written() == 2);
  task.finish();
  accel::progress::bytes_written(1 << 20);  // a finished task counts no more
  CHECK(task.bytes_written() == uint64_t(4) << 20);
  REQUIRE(c.lines.size() == 2);
  CHECK(c.lines[1].find("(2 files, 4.00 MiB, ") != std::string::npos);
}

TEST_CASE("progress: the innermost task takes the bytes; an outer one keeps its own") {
  Captured c;
  Task outer("setup", true, Display::lines, c.output());
  {
    Task inner("checkpoint step_00000001", true, Display::lines, c.output());
    accel::progress::bytes_written(100);
    inner.finish();
    CHECK(inner.bytes_written() == 100);
  }
  accel::progress::bytes_written(7);
  CHECK(outer.bytes_written() == 7);
}

TEST_CASE("progress: on a terminal, redraws in place (throttled) and clears before the end line") {
  Captured c;
  {
    Task task("weights export", true, Display::tty, c.output());
    accel::progress::stage("gathering the full weights");
    accel::progress::expect_bytes(2 << 20);
    accel::progress::stage("writing");
    for (int i = 0; i < 1000; ++i) accel::progress::bytes_written((2 << 20) / 1000);
    accel::progress::file_written();
  }  // finished by its destructor
  REQUIRE(c.lines.size() == 1);  // no start line: the drawn status is the start
  CHECK(starts_with(c.lines[0], "weights export took "));
  REQUIRE(c.draws.size() >= 3);
  // 1000 writes within well under a second: redraws are at most every 0.1 s, not one per write.
  CHECK(c.draws.size() < 100);
  CHECK(c.draws.front() == "weights export | 0.00 s");
  CHECK(starts_with(c.draws[1], "weights export: gathering the full weights | "));
  CHECK(starts_with(c.draws[2], "weights export: writing [....................]   0% 0 B of 2.00 MiB, 0 files | "));
  CHECK(c.draws.back().empty());  // cleared, then the end line
}

TEST_CASE("progress: counted work shows a bar with done/total on a terminal") {
  Captured c;
  Task task("evaluation at step 10", true, Display::tty, c.output());
  task.set_total(4, "batches");
  task.set_stage("forward");  // a stage change draws at once
  task.advance(2);
  task.set_stage("forward");
  CHECK(starts_with(c.draws.back(), "evaluation at step 10: forward [##########..........]  50% 2/4 batches | "));
}

TEST_CASE("progress: an invisible task (another rank) or display off prints nothing but keeps time") {
  Captured c;
  {
    Task hidden("setup", false, Display::tty, c.output());
    Task off("setup", true, Display::off, c.output());
    hidden.set_stage("building the model");
    CHECK(hidden.finish() >= 0);
  }
  CHECK(c.lines.empty());
  CHECK(c.draws.empty());
}

TEST_CASE("progress: a task left by an exception clears its line and claims no time") {
  Captured c;
  try {
    Task task("checkpoint step_00000003", true, Display::tty, c.output());
    task.set_stage("writing");
    throw std::runtime_error("disk full");
  } catch (const std::runtime_error&) {
  }
  CHECK(c.lines.empty());
  REQUIRE(!c.draws.empty());
  CHECK(c.draws.back().empty());
}

TEST_CASE("progress: the bar is the trainer's") {
  CHECK(accel::progress::bar(12, 60) == "[####................]  20% ");
  CHECK(accel::progress::bar(60, 60) == "[####################] 100% ");
  CHECK(accel::progress::bar(0, 0) == "[####################] 100% ");
}
