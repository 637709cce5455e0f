// accel::SyncBatchNorm (include/accel/sync_batch_norm.hpp) at world 1 is torch::nn::BatchNorm2d:
// the same parameter and buffer names, forward output, input and parameter gradients, running
// statistics and eval output, without an Accelerator and with one (a world of one). World 2 and 4
// against world 1 run through `accel launch` in tests/numerics/test_public_api_cnn.py.
#include "tests/support/catch_with_torch.hpp"

#include <torch/torch.h>

#include <sstream>
#include <string>
#include <vector>

#include "accel/accel.hpp"
#include "tests/support/temp_dir.hpp"

namespace {

// Tolerances: SyncBatchNorm computes the same quantities with other formulas (statistics from double
// sums, the normalisation and its backward as separate fp32 ops instead of torch's fused kernel), so
// results agree to fp32 rounding: a few ulps of values up to ~25 (gradients are sums of 150 terms).
// Measured: at most 3.8e-6 absolute on a value of 12, 1.4e-6 on one of 2.8.
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;

bool close(const torch::Tensor& a, const torch::Tensor& b) { return torch::allclose(a, b, kRtol, kAtol); }

std::vector<std::string> keys(const torch::OrderedDict<std::string, torch::Tensor>& d) { return d.keys(); }

// Three training forwards and backwards of `sync` and `plain` (the same options, weights copied),
// then an eval forward; every output, gradient and buffer compared.
void compare_with_batch_norm2d(const torch::nn::BatchNormOptions& options) {
  accel::SyncBatchNorm sync(options);
  torch::nn::BatchNorm2d plain(options);
  CHECK(keys(sync->named_parameters()) == keys(plain->named_parameters()));
  CHECK(keys(sync->named_buffers()) == keys(plain->named_buffers()));
  torch::manual_seed(3);
  if (options.affine()) {
    torch::NoGradGuard no_grad;
    sync->weight.uniform_(0.5, 1.5);
    sync->bias.uniform_(-0.5, 0.5);
    plain->weight.copy_(sync->weight);
    plain->bias.copy_(sync->bias);
  }
  for (int step = 0; step < 3; ++step) {
    INFO("training step " << step);
    // Channels with an offset and a scale of their own, so the statistics matter.
    torch::Tensor x = torch::randn({6, options.num_features(), 5, 5}) * torch::linspace(0.5, 3, options.num_features()).view({1, -1, 1, 1}) + 2;
    torch::Tensor upstream = torch::randn_like(x);  // dL/dy, not constant: the backward's two sums matter
    torch::Tensor xs = x.clone().requires_grad_(true), xp = x.clone().requires_grad_(true);
    torch::Tensor ys = sync(xs), yp = plain(xp);
    CHECK(close(ys, yp));
    (ys * upstream).sum().backward();
    (yp * upstream).sum().backward();
    CHECK(close(xs.grad(), xp.grad()));
    if (options.affine()) {
      CHECK(close(sync->weight.grad(), plain->weight.grad()));
      CHECK(close(sync->bias.grad(), plain->bias.grad()));
      sync->weight.mutable_grad().zero_();
      sync->bias.mutable_grad().zero_();
      plain->weight.mutable_grad().zero_();
      plain->bias.mutable_grad().zero_();
    }
    CHECK(close(sync->running_mean, plain->running_mean));
    CHECK(close(sync->running_var, plain->running_var));
    CHECK(sync->num_batches_tracked.item<int64_t>() == plain->num_batches_tracked.item<int64_t>());
  }
  sync->eval();
  plain->eval();
  torch::Tensor x = torch::randn({4, options.num_features(), 3, 3});
  CHECK(close(sync(x), plain(x)));  // the same call, on running statistics equal to rounding
}

void compare_all_options() {
  SECTION("default options") { compare_with_batch_norm2d(torch::nn::BatchNormOptions(4)); }
  SECTION("momentum 0.3, eps 1e-3") { compare_with_batch_norm2d(torch::nn::BatchNormOptions(3).momentum(0.3).eps(1e-3)); }
  SECTION("cumulative average (momentum none), no affine") {
    compare_with_batch_norm2d(torch::nn::BatchNormOptions(5).momentum(std::nullopt).affine(false));
  }
}

}  // namespace

TEST_CASE("SyncBatchNorm without an Accelerator is torch::nn::BatchNorm2d", "[api][sync_batch_norm]") {
  compare_all_options();
}

TEST_CASE("SyncBatchNorm under an Accelerator at world 1 is torch::nn::BatchNorm2d", "[api][sync_batch_norm]") {
  accel::test::TempDir dir;
  accel::Accelerator acc(
      dir.write("job.yaml", "num_processes: 1\nbackend: ddp\ntraining:\n  output_dir: " + (dir.path() / "run").string() + "\n"));
  REQUIRE(acc.world_size() == 1);
  compare_all_options();
}

TEST_CASE("SyncBatchNorm: without track_running_stats eval uses the batch; bad inputs are refused", "[api][sync_batch_norm]") {
  auto options = torch::nn::BatchNormOptions(2).track_running_stats(false);
  accel::SyncBatchNorm sync(options);
  torch::nn::BatchNorm2d plain(options);
  CHECK(keys(sync->named_buffers()) == keys(plain->named_buffers()));
  sync->eval();
  plain->eval();
  torch::Tensor x = torch::randn({3, 2, 4, 4}) + 1;
  CHECK(close(sync(x), plain(x)));
  CHECK_THROWS_WITH(sync(torch::randn({3})), Catch::Matchers::Contains("two or more dimensions"));
  CHECK_THROWS_WITH(sync(torch::randn({3, 5, 2, 2})), Catch::Matchers::Contains("5 channels"));
  sync->train();
  CHECK_THROWS_WITH(sync(torch::randn({1, 2})), Catch::Matchers::Contains("more than 1 value per channel"));
  std::ostringstream printed;
  printed << *sync;
  CHECK(printed.str() == "accel::SyncBatchNorm(2, eps=1e-05, momentum=0.1, affine=true, track_running_stats=false)");
}

ACCEL_ASSERT_CHECK_IS_CATCH();

TEST_CASE("SyncBatchNorm with bf16 parameters and fp32 running statistics (mixed_precision bf16)", "[api][sync_batch_norm]") {
  // What prepare() leaves under bf16: the parameters bf16 views, the buffers fp32. Training and
  // eval must run and give plain fp32 batch norm's values to bf16 rounding (2^-8 relative per
  // rounding; a few roundings per value: 3e-2 of values of order 1).
  accel::SyncBatchNorm sync(4);
  torch::nn::BatchNorm2d plain(4);
  {
    torch::NoGradGuard no_grad;
    sync->weight.set_data(sync->weight.to(torch::kBFloat16));
    sync->bias.set_data(sync->bias.to(torch::kBFloat16));
  }
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({6, 4, 3, 3});
  const torch::Tensor y = sync->forward(x.to(torch::kBFloat16));
  CHECK(y.scalar_type() == torch::kBFloat16);
  CHECK(torch::allclose(y.to(torch::kFloat), plain->forward(x), 3e-2, 3e-2));
  CHECK(sync->running_mean.scalar_type() == torch::kFloat);
  CHECK(torch::allclose(sync->running_mean, plain->running_mean, 1e-2, 1e-3));  // from bf16 inputs
  sync->eval();
  plain->eval();
  const torch::Tensor e = sync->forward(x.to(torch::kBFloat16));
  CHECK(e.scalar_type() == torch::kBFloat16);
  CHECK(torch::allclose(e.to(torch::kFloat), plain->forward(x), 3e-2, 3e-2));
}
