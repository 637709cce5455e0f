// The trackers' files (runtime/tracking, docs/design/0024): CRC-32C on published vectors, TFRecord
// framing and its checks, the Event encoding read back, and what a resumed run keeps of the event
// file and of the MLflow store. The formats against TensorBoard's and MLflow's own readers:
// tests/numerics/test_trackers.py.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "runtime/common/errors.hpp"
#include "runtime/config/job.hpp"
#include "runtime/tracking/crc32c.hpp"
#include "runtime/tracking/event_file.hpp"
#include "runtime/tracking/mlflow_store.hpp"
#include "runtime/tracking/protobuf_wire.hpp"
#include "runtime/tracking/tfrecord.hpp"
#include "runtime/tracking/trackers.hpp"
#include "support/temp_dir.hpp"

using namespace accel;
using namespace accel::tracking;
using accel::test::read_file;
using accel::test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string run_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const RunError& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<EventFacts> events_of(const std::string& path) {
  std::vector<EventFacts> out;
  for (const auto& payload : read_tfrecords(path).payloads) out.push_back(*decode_event(payload));
  return out;
}

}  // namespace

TEST_CASE("crc32c: RFC 3720's vectors and the check value; continuation; TFRecord's mask") {
  CHECK(crc32c("123456789") == 0xE3069283u);  // the CRC catalogue's check value for CRC-32C
  CHECK(crc32c(std::string(32, '\0')) == 0x8A9136AAu);
  CHECK(crc32c(std::string(32, '\xff')) == 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; ++i) {
    up.push_back(char(i));
    down.push_back(char(31 - i));
  }
  CHECK(crc32c(up) == 0x46DD794Eu);
  CHECK(crc32c(down) == 0x113FDB5Cu);
  CHECK(crc32c("") == 0u);
  CHECK(crc32c("56789", crc32c("1234")) == crc32c("123456789"));
  CHECK(masked_crc32c("") == 0xa282ead8u);
  CHECK(masked_crc32c("123456789") == 0xc78ab0e5u);  // rotr(0xE3069283, 15) + 0xa282ead8
}

TEST_CASE("protobuf wire: varints, fixed fields and nested bytes read back") {
  proto::Writer w;
  w.varint(1, 300).int64(2, -1).fixed64_double(3, 0.1).fixed32_float(4, 2.5f).bytes(5, "hi");
  CHECK(w.data().substr(0, 3) == std::string("\x08\xac\x02", 3));  // 300 as the spec's example
  auto fields = proto::parse(w.data());
  REQUIRE(fields);
  REQUIRE(fields->size() == 5);
  CHECK((*fields)[0].number == 300);
  CHECK(int64_t((*fields)[1].number) == -1);
  CHECK(proto::as_double((*fields)[2]) == 0.1);
  CHECK(proto::as_float((*fields)[3]) == 2.5f);
  CHECK((*fields)[4].bytes == "hi");
  CHECK_FALSE(proto::parse(w.data().substr(0, w.data().size() - 1)));  // a length past the end
}

TEST_CASE("tfrecord: frames read back; a cut last record is dropped; a bad CRC is refused") {
  TempDir dir;
  const std::string path = (dir.path() / "records").string();
  const std::string a = tfrecord_frame("first"), b = tfrecord_frame(std::string(300, 'x'));
  CHECK(a.size() == 5 + 16);
  std::ofstream(path, std::ios::binary) << a << b;
  auto all = read_tfrecords(path);
  CHECK(all.payloads == std::vector<std::string>{"first", std::string(300, 'x')});
  CHECK_FALSE(all.cut_short);
  CHECK(read_tfrecords((dir.path() / "absent").string()).payloads.empty());

  std::ofstream(path, std::ios::binary) << a << b.substr(0, b.size() - 3);  // a crash inside the last record
  auto cut = read_tfrecords(path);
  CHECK(cut.payloads == std::vector<std::string>{"first"});
  CHECK(cut.cut_short);

  std::string damaged = a + b;
  damaged[a.size() - 1] ^= 0x01;  // the first record's payload CRC
  std::ofstream(path, std::ios::binary) << damaged;
  CHECK_THAT(run_error([&] { read_tfrecords(path); }),
             Catch::Contains("record at byte 0: payload CRC does not match"));
  damaged = a + b;
  damaged[a.size() + 9] ^= 0x01;  // the second record's length CRC
  std::ofstream(path, std::ios::binary) << damaged;
  CHECK_THAT(run_error([&] { read_tfrecords(path); }),
             Catch::Contains("record at byte 21: length CRC does not match"));
}

TEST_CASE("event file: file_version first, scalar and text events; a resume keeps the scalars of kept steps") {
  TempDir dir;
  const std::string tb = (dir.path() / "tb").string();
  {
    EventFile events(tb, 0);
    events.text(0, "job", "    a: 1\n");
    for (int64_t step = 0; step < 5; ++step) events.scalars(step, {{"train/loss", 1.0 / double(step + 1)}, {"x", 2}});
  }
  const std::string path = tb + "/" + EventFile::kFileName;
  auto payloads = read_tfrecords(path).payloads;
  REQUIRE(payloads.size() == 7);
  auto version = proto::parse(payloads[0]);
  REQUIRE(version);
  CHECK((*version)[1].field == 3);
  CHECK((*version)[1].bytes == "brain.Event:2");
  auto facts = events_of(path);
  CHECK_FALSE(facts[1].scalars);  // the text
  CHECK(facts[6].scalars);
  CHECK(facts[6].step == 4);

  {
    EventFile resumed(tb, 3);  // a checkpoint of 3 steps: steps 0-2 stay, the old text goes
    resumed.scalars(3, {{"train/loss", 0.5}});
  }
  facts = events_of(path);
  REQUIRE(facts.size() == 5);  // file_version, steps 0 1 2, the new step 3
  for (int64_t i = 0; i < 4; ++i) {
    CHECK(facts[size_t(i) + 1].scalars);
    CHECK(facts[size_t(i) + 1].step == i);
  }
  { EventFile fresh(tb, 0); }
  CHECK(events_of(path).size() == 1);

  // A damaged record refuses the resume and leaves the file as it was.
  { EventFile again(tb, 0); again.scalars(0, {{"a", 1}}); again.scalars(1, {{"a", 2}}); }
  std::string bytes = read_file(path);
  const size_t second_event = tfrecord_frame(read_tfrecords(path).payloads[0]).size();
  bytes[second_event + 14] ^= 0x40;  // inside the step-0 event's payload
  std::ofstream(path, std::ios::binary) << bytes;
  CHECK_THAT(run_error([&] { EventFile(tb, 2); }), Catch::Contains("payload CRC does not match"));
  CHECK(read_file(path) == bytes);
}

TEST_CASE("mlflow store: the layout MLflow's FileStore reads; a resume keeps the run and the kept lines") {
  TempDir dir;
  const std::string root = (dir.path() / "mlruns").string();
  std::string run_dir, run_id;
  {
    MlflowRun run(root, "demo", "out", 0);
    run_dir = run.run_dir();
    run_id = run.run_id();
    run.set_params({{"training.lr", "0.001"}, {"program", "[]"}});
    for (int64_t step = 0; step < 4; ++step) run.log_metrics(step, {{"train/loss", 0.1 * double(step)}, {"eval/loss", 1e-300}});
    CHECK_THAT(read_file(run_dir + "/meta.yaml"), Catch::Contains("status: 1"));
  }
  CHECK(run_id.size() == 32);
  CHECK(run_dir == root + "/1/" + run_id);
  CHECK_THAT(read_file(root + "/0/meta.yaml"), Catch::Contains("name: \"Default\""));
  CHECK_THAT(read_file(root + "/1/meta.yaml"), Catch::Contains("name: \"demo\"") && Catch::Contains("experiment_id: \"1\""));
  const std::string meta = read_file(run_dir + "/meta.yaml");
  CHECK_THAT(meta, Catch::Contains("status: 3") && Catch::Contains("run_id: \"" + run_id + "\""));
  CHECK(fs::is_directory(run_dir + "/artifacts"));
  CHECK(read_file(run_dir + "/params/training.lr") == "0.001");
  CHECK(read_file(run_dir + "/tags/mlflow.source.name") == "accel");
  const std::string loss = read_file(run_dir + "/metrics/train/loss");
  CHECK(std::count(loss.begin(), loss.end(), '\n') == 4);
  CHECK_THAT(loss, Catch::EndsWith(" 0.30000000000000004 3\n"));  // %.17g: the double, exactly
  CHECK_THAT(read_file(run_dir + "/metrics/eval/loss"), Catch::Contains(" 1e-300 0\n"));

  {
    MlflowRun resumed(root, "demo", "out", 2);
    CHECK(resumed.run_id() == run_id);
    CHECK(fs::is_empty(run_dir + "/params"));  // the caller sets them anew
    CHECK_THAT(read_file(run_dir + "/meta.yaml"), Catch::Contains("status: 1") && Catch::Contains("end_time: ~"));
  }
  const std::string kept = read_file(run_dir + "/metrics/train/loss");
  CHECK(std::count(kept.begin(), kept.end(), '\n') == 2);
  { MlflowRun fresh(root, "demo", "out", 0); }
  CHECK_FALSE(fs::exists(run_dir + "/metrics/train/loss"));  // MLflow refuses a metric file without data

  // A failed run says so; a damaged line before the last refuses the resume.
  try {
    MlflowRun run(root, "demo", "out", 0);
    run.log_metrics(0, {{"a", 1}});
    run.log_metrics(1, {{"a", 2}});
    throw RunError("the step failed");
  } catch (const RunError&) {
  }
  CHECK_THAT(read_file(run_dir + "/meta.yaml"), Catch::Contains("status: 4"));
  std::ofstream(run_dir + "/metrics/a") << "1 1 0\nnot a line\n2 2 1\n";
  CHECK_THAT(run_error([&] { MlflowRun(root, "demo", "out", 5); }),
             Catch::Contains("metrics/a:2: not an MLflow metric line"));
  std::ofstream(run_dir + "/metrics/a") << "1 1 0\n2 2";  // a last line cut short goes
  { MlflowRun run(root, "demo", "out", 5); }
  CHECK(read_file(run_dir + "/metrics/a") == "1 1 0\n");
}

TEST_CASE("mlflow names: what MLflow would refuse is refused by name") {
  for (const char* ok : {"loss", "train/loss", "a.b-c_d:e f", "x/y/z"}) CHECK(MlflowRun::refusal_of_name(ok).empty());
  for (const char* bad : {"", "loss(avg)", "/abs", "a//b", "a/./b", "../up", "a/", ".", "é"})
    CHECK_FALSE(MlflowRun::refusal_of_name(bad).empty());
  TempDir dir;
  MlflowRun run((dir.path() / "mlruns").string(), "demo", "out", 0);
  CHECK_THAT(run_error([&] { run.log_metrics(0, {{"loss(avg)", 1}}); }),
             Catch::Contains("mlflow: metric 'loss(avg)': MLflow takes only letters, digits"));
}

TEST_CASE("trackers: log_with's names, all expanded; none writes nothing") {
  config::TrackingSection t;
  CHECK(trackers_of(t).empty());
  t.log_with = {"mlflow", "tensorboard", "mlflow"};
  CHECK(trackers_of(t) == std::vector<std::string>{"tensorboard", "mlflow"});
  t.log_with = {"all"};
  CHECK(trackers_of(t) == std::vector<std::string>{"tensorboard", "mlflow"});
  TempDir dir;
  config::JobConfig job;
  job.training.output_dir = (dir.path() / "out").string();
  Trackers none(job, 0);
  CHECK(none.empty());
  CHECK_FALSE(fs::exists(job.training.output_dir));
  job.tracking.log_with = {"all"};
  {
    Trackers both(job, 0);
    both.log(0, {{"train/loss", 2.5}});
  }
  CHECK(fs::exists(job.training.output_dir + "/tensorboard/" + EventFile::kFileName));
  CHECK(fs::exists(job.training.output_dir + "/mlruns/1"));
}
