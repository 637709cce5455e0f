// tracking.log_with and tracking.project_name (docs/design/0024): Accelerate's tracker names,
// one word or a list, from every layer; an unknown or unbuilt name refused at the element itself.
#include <catch2/catch.hpp>

#include "runtime/config/dump.hpp"
#include "runtime/config/job_loader.hpp"
#include "support/temp_dir.hpp"
#include "unit/load_job_test_support.hpp"

using namespace accel;
using namespace accel::config;
using accel::test::TempDir;

namespace {

using accel::test::error_text;
using accel::test::load;

using Names = std::vector<std::string>;

}  // namespace

TEST_CASE("tracking.log_with: a list, one word, any case, from the file, the environment and --set") {
  TempDir dir;
  CHECK(load(dir.write("none.yaml", "")).job.tracking.log_with.empty());
  CHECK(load(dir.write("none.yaml", "")).job.tracking.project_name == "accel");
  auto listed = load(dir.write("list.yaml", "tracking:\n  log_with: [TensorBoard, mlflow]\n  project_name: demo\n"));
  CHECK(listed.job.tracking.log_with == Names{"tensorboard", "mlflow"});
  CHECK(listed.job.tracking.project_name == "demo");
  CHECK(listed.sources.at("tracking.log_with").str() == dir.path().string() + "/list.yaml:2:13");
  CHECK(load(dir.write("word.yaml", "tracking:\n  log_with: all\n")).job.tracking.log_with == Names{"all"});
  auto empty = dir.write("empty.yaml", "tracking:\n  log_with: []\n");
  CHECK(load(empty).job.tracking.log_with.empty());
  CHECK(load(empty, {"tracking.log_with=mlflow"}).job.tracking.log_with == Names{"mlflow"});
  CHECK(load(empty, {}, {{"ACCEL_TRACKING_LOG_WITH", "[mlflow, tensorboard]"}}).job.tracking.log_with ==
        Names{"mlflow", "tensorboard"});
}

TEST_CASE("tracking.log_with: an unknown name is refused at its own position, with the allowed names") {
  TempDir dir;
  auto file = dir.write("job.yaml", "tracking:\n  log_with:\n    - mlflow\n    - tensorbord\n    - wandb\n");
  const std::string text = error_text([&] { load(file); });
  // Both bad elements, each at its line and column, in one pass.
  CHECK_THAT(text, Catch::Contains(file + ":4:7: error: tracking.log_with: unknown value"));
  CHECK_THAT(text, Catch::Contains("value:   tensorbord"));
  CHECK_THAT(text, Catch::Contains("allowed: list of tensorboard | mlflow | all"));
  CHECK_THAT(text, Catch::Contains("did you mean 'tensorboard'?"));
  CHECK_THAT(text, Catch::Contains(file + ":5:7: error: tracking.log_with: unknown value"));
  CHECK_THAT(text, Catch::Contains("'wandb' is not built in accel; use one of the allowed values"));
  // A single word and an override are checked the same way.
  CHECK_THAT(error_text([&] { load(dir.write("word.yaml", "tracking:\n  log_with: comet_ml\n")); }),
             Catch::Contains("word.yaml:2:13: error: tracking.log_with: unknown value"));
  CHECK_THAT(error_text([&] { load(dir.write("ok.yaml", ""), {"tracking.log_with=[aim]"}); }),
             Catch::Contains("tracking.log_with: unknown value") && Catch::Contains("'aim' is not built in accel"));
  // Not a list of words.
  CHECK_THAT(error_text([&] { load(dir.write("map.yaml", "tracking:\n  log_with: {a: 1}\n")); }),
             Catch::Contains("tracking.log_with: expected a list of strings"));
}

TEST_CASE("tracking.project_name: MLflow needs a name") {
  TempDir dir;
  auto file = dir.write("job.yaml", "tracking:\n  log_with: [all]\n  project_name: \"\"\n");
  CHECK_THAT(error_text([&] { load(file); }),
             Catch::Contains(file + ":3:17: error: tracking.project_name: is empty, and MLflow needs an experiment name"));
  // Without mlflow the name is not used.
  CHECK_NOTHROW(load(file, {"tracking.log_with=tensorboard"}));
}

TEST_CASE("the tracking block dumps and reads back") {
  TempDir dir;
  auto original = load(dir.write("job.yaml", "tracking:\n  log_with: [mlflow, tensorboard]\n  project_name: my runs\n"));
  const std::string text = dump_job(original.job, original.sources, DumpStyle::Full);
  CHECK_THAT(text, Catch::Contains("tracking:\n  log_with: [mlflow, tensorboard]\n  project_name: my runs\n"));
  auto again = load(dir.write("again.yaml", text));
  CHECK(again.job.tracking.log_with == original.job.tracking.log_with);
  CHECK(again.job.tracking.project_name == "my runs");
}
