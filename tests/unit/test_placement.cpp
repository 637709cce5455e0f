// Placement on this machine's GPUs (runtime/config/placement.hpp) through load_job with a given GPU
// count: device auto, num_processes defaulting to the GPUs, and the errors for cuda without a GPU
// or more processes than GPUs (exit 2 material: ConfigError naming the key and its position).
#include <catch2/catch.hpp>

#include "runtime/config/job_loader.hpp"
#include "support/temp_dir.hpp"

using namespace accel;
using namespace accel::config;
using accel::test::TempDir;
using Catch::Matchers::Contains;

namespace {

LoadedJob load_on(int gpus, const std::string& file, std::vector<std::string> sets = {}) {
  LoadOptions o;
  o.file = file;
  o.set_overrides = std::move(sets);
  o.gpus_here = GpuCount{gpus, gpus == 0 ? "libcuda.so.1 (the NVIDIA driver) is not installed" : ""};
  return load_job(o);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("device auto: cuda with one process per GPU when GPUs exist, else cpu with the job's count") {
  TempDir dir;
  const auto file = dir.write("job.yaml", "device: auto\n");
  auto eight = load_on(8, file);
  CHECK(eight.job.device == Device::cuda);
  CHECK(eight.job.num_processes == 8);
  CHECK(eight.sources.at("num_processes").str() == "derived (one process per GPU: 8 CUDA GPUs x 1 machine(s))");
  CHECK_THAT(eight.sources.at("device").str(), Contains("auto: this machine has 8 CUDA GPUs"));

  auto none = load_on(0, file);
  CHECK(none.job.device == Device::cpu);
  CHECK(none.job.num_processes == 1);
  CHECK_THAT(none.sources.at("device").str(), Contains("no CUDA GPU here (libcuda.so.1"));

  // Two machines of 4 GPUs: 8 processes in all.
  auto two = load_on(4, file, {"num_machines=2"});
  CHECK(two.job.num_processes == 8);
  // Without a GPU count (accel config validate) the job is checked as written.
  LoadOptions as_written;
  as_written.file = file;
  CHECK(load_job(as_written).job.device == Device::auto_);
}

TEST_CASE("an explicit num_processes is kept when the GPUs suffice, an error naming it when not") {
  TempDir dir;
  const auto file = dir.write("job.yaml", "device: cuda\nnum_processes: 2\n");
  CHECK(load_on(2, file).job.num_processes == 2);
  CHECK(load_on(8, file).job.num_processes == 2);
  const std::string e = error_of([&] { load_on(1, file); });
  CHECK_THAT(e, Contains("job.yaml:2:16: error: num_processes: asks for 2 processes per machine on device cuda, "
                         "but this machine has 1 CUDA GPU") &&
                    Contains("allowed: 1..1") && Contains("set num_processes to 1 or fewer"));
  // Per machine: 8 processes on 2 machines need 4 GPUs each.
  CHECK(load_on(4, file, {"num_processes=8", "num_machines=2"}).job.num_processes == 8);
  CHECK_THAT(error_of([&] { load_on(3, file, {"num_processes=8", "num_machines=2"}); }),
             Contains("--set num_processes=8") && Contains("asks for 4 processes per machine"));
}

TEST_CASE("device cuda on a machine without a GPU is an error naming device and the reason") {
  TempDir dir;
  const auto file = dir.write("job.yaml", "num_processes: 2\ndevice: cuda\n");
  const std::string e = error_of([&] { load_on(0, file); });
  CHECK_THAT(e, Contains("job.yaml:2:9: error: device: cuda, but this machine has no CUDA GPU: libcuda.so.1") &&
                    Contains("use device: cpu"));
  CHECK(load_on(0, file, {"device=cpu"}).job.device == Device::cpu);
}

TEST_CASE("cuda_collectives gloo lets ranks share GPUs; nccl keeps one GPU per rank") {
  TempDir dir;
  const auto file = dir.write("job.yaml", "device: cuda\nnum_processes: 2\ncuda_collectives: gloo\n");
  auto shared = load_on(1, file);
  CHECK(shared.job.num_processes == 2);
  CHECK(shared.job.cuda_collectives == CudaCollectives::gloo);
  // Still no GPU at all is an error, whatever the collectives.
  CHECK_THAT(error_of([&] { load_on(0, file); }), Contains("device: cuda, but this machine has no CUDA GPU"));
  // The nccl error points at the way to share a GPU.
  CHECK_THAT(error_of([&] { load_on(1, file, {"cuda_collectives=nccl"}); }),
             Contains("asks for 2 processes per machine") && Contains("set cuda_collectives: gloo"));
}

TEST_CASE("cuda_collectives on device cpu is a warning naming the key, not an error") {
  TempDir dir;
  const auto file = dir.write("job.yaml", "device: cpu\ncuda_collectives: gloo\n");
  auto loaded = load_on(0, file);
  REQUIRE(loaded.warnings.size() == 1);
  CHECK(loaded.warnings[0].key_path == "cuda_collectives");
  CHECK_THAT(loaded.warnings[0].message, Contains("no effect on device cpu"));
  // Left at its default it says nothing.
  CHECK(load_on(0, dir.write("plain.yaml", "device: cpu\n")).warnings.empty());
}
