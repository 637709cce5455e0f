// NVMe parameter offload (DeepSpeed offload_param_device: nvme, ZeRO-3): the parameter store
// stages shards from files (any dtype) or from the optimizer's master file, and never holds more
// than buffer_count staged shards.
#include "tests/support/catch_with_torch.hpp"

#include <filesystem>

#include "backends/core/nvme_param_store.hpp"
#include "tests/support/temp_dir.hpp"

namespace fs = std::filesystem;
using namespace accel::backends;

TEST_CASE("nvme param store: shards in files of their dtype, or read from the master file; a bounded pool",
          "[offload][param_offload]") {
  accel::test::TempDir dir;
  NvmeStateStore states(dir.path().string(), 0, 2);
  states.add_unit("m", 3 * 5);  // master (5 values) + two moments
  states.write(0, at::arange(15, at::kFloat));
  std::string scratch;
  {
    NvmeParamStore bf16(dir.path().string(), 0, 2, at::kBFloat16);
    scratch = bf16.directory();
    CHECK(scratch != states.directory());  // the two stores may share a directory
    const at::Tensor a = at::linspace(-1, 1, 7), b = at::linspace(3, 4, 5);
    CHECK(bf16.add_unit("a", a) == 0);
    CHECK(bf16.add_unit("b", b) == 1);
    CHECK(fs::file_size(bf16.file_path(0)) == 7 * 2);
    CHECK(fs::file_size(bf16.file_path(1)) == 5 * 2);
    CHECK(bf16.bytes_on_disk() == 12 * 2);
    CHECK(bf16.buffer_bytes() == 2 * 7 * 2);
    CHECK(at::equal(bf16.read(0), a.to(at::kBFloat16)));  // rounded once, like a compute-shard copy
    at::Tensor s0 = bf16.stage(0), s1 = bf16.stage(1);
    CHECK(at::equal(s1, b.to(at::kBFloat16)));
    CHECK(bf16.staged() == 2);
    CHECK_THROWS_WITH(bf16.stage(0), Catch::Contains("staged already"));
    bf16.unstage(0);
    bf16.write(0, a + 1);  // the write-back after a step
    CHECK(at::equal(bf16.stage(0), (a + 1).to(at::kBFloat16)));
    CHECK(bf16.peak_staged() == 2);
    CHECK_THROWS_WITH(bf16.write(1, at::ones({4})), Catch::Contains("holds 5 values"));

    NvmeParamStore fp32(dir.path().string(), 1, 1, at::kFloat);
    CHECK(fp32.add_master_view(states, 0, 5) == 0);
    CHECK_FALSE(fp32.has_own_file(0));
    CHECK(fp32.bytes_on_disk() == 0);  // the optimizer's file
    CHECK(fp32.add_master_view(states, 0, 5) == 1);
    CHECK(at::equal(fp32.stage(0), at::arange(5, at::kFloat)));
    CHECK_THROWS_WITH(fp32.stage(1), Catch::Contains("all 1 staging buffers are in use"));
    fp32.unstage(0);
    CHECK(at::equal(fp32.stage(1), at::arange(5, at::kFloat)));
    CHECK_THROWS_WITH(fp32.write(1, at::ones({5})), Catch::Contains("not written here"));
  }
  CHECK_FALSE(fs::exists(scratch));  // scratch files go with the store
  NvmeParamStore bf16(dir.path().string(), 2, 1, at::kBFloat16);
  CHECK_THROWS_WITH(bf16.add_master_view(states, 0, 5), Catch::Contains("needs fp32 compute"));
}

ACCEL_ASSERT_CHECK_IS_CATCH();
