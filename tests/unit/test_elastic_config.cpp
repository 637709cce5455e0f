// Elastic jobs in the job file (docs/design/0027): num_machines as torchrun's MIN:MAX from every
// layer, its errors, min_machines against the rest of the job, and the elastic_batch rule.
#include <catch2/catch.hpp>

#include "runtime/config/dump.hpp"
#include "runtime/config/elastic_rules.hpp"
#include "runtime/config/machine_range.hpp"
#include "support/temp_dir.hpp"
#include "unit/load_job_test_support.hpp"

using namespace accel;
using namespace accel::config;
using accel::test::error_text;
using accel::test::load;
using accel::test::TempDir;

namespace {

const char* kElasticJob = "num_processes: 4\nnum_machines: 1:2\nmax_restarts: 2\ntraining:\n  gradient_accumulation_steps: 1\n";

}  // namespace

TEST_CASE("parse_machine_range: MIN:MAX with 1 <= MIN <= MAX <= the limit") {
  std::string problem;
  auto r = parse_machine_range("1:2", 1024, &problem);
  REQUIRE(r);
  CHECK(r->min == 1);
  CHECK(r->max == 2);
  CHECK(parse_machine_range(" 2 : 2 ", 1024, &problem)->min == 2);
  CHECK_FALSE(parse_machine_range("0:2", 1024, &problem));
  CHECK(problem == "MIN must be at least 1 machine");
  CHECK_FALSE(parse_machine_range("3:2", 1024, &problem));
  CHECK(problem == "MIN is larger than MAX");
  CHECK_FALSE(parse_machine_range("1:2000", 1024, &problem));
  CHECK(problem == "MAX is more than 1024 machines");
  CHECK_FALSE(parse_machine_range("1:2:3", 1024, &problem));
  CHECK(problem == "a range has exactly two numbers, MIN:MAX");
  for (const char* bad : {"a:2", "1:", ":2", "1.5:2", "-1:2", "1:0x2"}) {
    INFO(bad);
    CHECK_FALSE(parse_machine_range(bad, 1024, &problem));
    CHECK(problem == "MIN and MAX of a MIN:MAX range must be whole numbers");
  }
}

TEST_CASE("num_machines: MIN:MAX sets min_machines and num_machines from the file, ACCEL_* and --set") {
  TempDir dir;
  auto file = dir.write("job.yaml", kElasticJob);
  auto from_file = load(file);
  CHECK(from_file.job.num_machines == 2);
  CHECK(from_file.job.min_machines == 1);
  CHECK(is_elastic(from_file.job));
  CHECK(from_file.sources.at("num_machines").str() == file + ":2:15");
  CHECK(from_file.sources.at("min_machines").str() == file + ":2:15 (from num_machines: 1:2)");

  auto fixed = dir.write("fixed.yaml", "num_processes: 6\n");
  auto from_env = load(fixed, {}, {{"ACCEL_NUM_MACHINES", "2:3"}, {"ACCEL_MAX_RESTARTS", "1"},
                                   {"ACCEL_TRAINING_GRADIENT_ACCUMULATION_STEPS", "2"}});
  CHECK(from_env.job.num_machines == 3);
  CHECK(from_env.job.min_machines == 2);
  CHECK(from_env.sources.at("min_machines").str() == "environment ACCEL_NUM_MACHINES");
  auto from_set = load(fixed, {"num_machines=3:3"});
  CHECK(from_set.job.num_machines == 3);
  CHECK(from_set.job.min_machines == 3);
  CHECK_FALSE(is_elastic(from_set.job));  // MIN == MAX: a fixed world
  CHECK(fewest_machines(from_set.job) == 3);

  // The resolved job (what workers read) writes the two keys and reads back the same.
  const std::string dumped = dump_job(from_file.job, from_file.sources, DumpStyle::Full);
  auto again = load(dir.write("again.yaml", dumped));
  CHECK(again.job.num_machines == 2);
  CHECK(again.job.min_machines == 1);
}

TEST_CASE("a malformed range is one error at num_machines with the form and a fix") {
  TempDir dir;
  auto file = dir.write("job.yaml", "num_processes: 4\nnum_machines: 2:1\n");
  const std::string text = error_text([&] { load(file); });
  CHECK_THAT(text, Catch::Contains(file + ":2:15: error: num_machines: MIN is larger than MAX"));
  CHECK_THAT(text, Catch::Contains("2:1"));
  CHECK_THAT(text, Catch::Contains("N, or MIN:MAX with 1 <= MIN <= MAX <= 1024"));
  CHECK_THAT(text, Catch::Contains("write e.g. 1:2"));
  CHECK_THAT(error_text([&] { load(file, {"num_machines=x:2"}); }),
             Catch::Contains("--set num_machines=x:2: error: num_machines: MIN and MAX of a MIN:MAX range must be "
                             "whole numbers"));
  // The range and an explicit min_machines must agree, as any key set twice in one layer.
  auto twice = dir.write("twice.yaml", "num_processes: 4\nnum_machines: 1:2\nmin_machines: 2\n");
  CHECK_THAT(error_text([&] { load(twice); }), Catch::Contains("min_machines: set twice with different values"));
}

TEST_CASE("min_machines above num_machines, and its warnings") {
  TempDir dir;
  auto file = dir.write("job.yaml", "num_processes: 4\nnum_machines: 2\nmin_machines: 3\n");
  const std::string text = error_text([&] { load(file); });
  CHECK_THAT(text, Catch::Contains("error: min_machines: is more than num_machines"));
  CHECK_THAT(text, Catch::Contains("0 .. 2"));

  auto no_restarts = load(dir.write("r.yaml", "num_processes: 4\nnum_machines: 1:2\n"));
  REQUIRE(no_restarts.warnings.size() == 1);
  CHECK(no_restarts.warnings[0].key_path == "min_machines");
  CHECK_THAT(no_restarts.warnings[0].message, Catch::Contains("max_restarts 0 a lost machine ends the job"));

  auto fixed = load(dir.write("f.yaml", "elastic_batch: keep_micro\nelastic_join_window_s: 2\nelastic_peer_timeout_s: 5\n"));
  REQUIRE(fixed.warnings.size() == 3);
  CHECK(fixed.warnings[0].key_path == "elastic_batch");
  CHECK(fixed.warnings[0].message == "has no effect: the job's world is fixed");
  CHECK(fixed.warnings[1].key_path == "elastic_join_window_s");
  CHECK(fixed.warnings[2].key_path == "elastic_peer_timeout_s");
}

TEST_CASE("elastic_peer_timeout_s: 15 s by default, 2 s at least") {
  TempDir dir;
  auto file = dir.write("job.yaml", "num_processes: 4\nnum_machines: 1:2\nmax_restarts: 1\n");
  CHECK(load(file).job.elastic_peer_timeout_s == 15);
  CHECK(load(file, {"elastic_peer_timeout_s=5"}).job.elastic_peer_timeout_s == 5);
  const std::string text = error_text([&] { load(file, {"elastic_peer_timeout_s=1"}); });
  CHECK_THAT(text, Catch::Contains("error: elastic_peer_timeout_s:"));
  CHECK_THAT(text, Catch::Contains("integer in [2, 3600]"));
}

TEST_CASE("elastic_batch keep_global: the accumulation at each machine count, refused when not whole") {
  CHECK(accumulation_at(1, 2, 2, ElasticBatch::keep_global) == 1);
  CHECK(accumulation_at(1, 2, 1, ElasticBatch::keep_global) == 2);
  CHECK(accumulation_at(3, 4, 2, ElasticBatch::keep_global) == 6);
  CHECK_FALSE(accumulation_at(1, 4, 3, ElasticBatch::keep_global));
  CHECK(accumulation_at(1, 4, 3, ElasticBatch::keep_micro) == 1);
  CHECK(smallest_elastic_accumulation(1, 2) == 1);
  CHECK(smallest_elastic_accumulation(2, 4) == 3);  // 3 machines need G x 4 divisible by 3
  CHECK(smallest_elastic_accumulation(1, 6) == 10);  // 4 needs 2, 5 needs 5: lcm 10

  TempDir dir;
  auto file = dir.write("job.yaml",
                        "num_processes: 8\nnum_machines: 2:4\nmax_restarts: 1\n"
                        "training:\n  gradient_accumulation_steps: 2\n");
  // At the default rule the error points at the range (where the user can act); at a rule the
  // user wrote, at the rule.
  const std::string text = error_text([&] { load(file); });
  CHECK_THAT(text, Catch::Contains(file + ":2:15 (from num_machines: 2:4): error: min_machines: elastic_batch keep_global "
                                   "(the default) cannot "
                                   "keep the global batch at 3 of 4 machines: gradient_accumulation_steps 2 x 4 "
                                   "machines is not a multiple of 3"));
  CHECK_THAT(text, Catch::Contains("make training.gradient_accumulation_steps a multiple of 3"));
  CHECK_THAT(text, Catch::Contains("elastic_batch: keep_micro"));
  CHECK_THAT(error_text([&] { load(file, {"elastic_batch=keep_global"}); }),
             Catch::Contains("--set elastic_batch=keep_global: error: elastic_batch: cannot keep the global batch"));
  CHECK(load(file, {"training.gradient_accumulation_steps=3"}).job.min_machines == 2);
  CHECK(load(file, {"elastic_batch=keep_micro"}).job.elastic_batch == ElasticBatch::keep_micro);
}
