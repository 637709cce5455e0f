// Global gradient norm and clipping: a hand computation, torch::nn::utils::clip_grad_norm_ (C++),
// the spec's "only above max_norm" rule, two ranks combining their sums of squares through the
// reduce hook, fp64 accuracy for bf16 and chunked large gradients.
// Tolerance vs torch 1e-6 relative: torch sums in fp32 (per-tensor norms, then the norm of norms)
// and forms the clip factor in fp32; we sum in fp64 and form the factor in fp64. Both are accurate
// to a few fp32 ulps (~1e-7) for these sizes.
#include "tests/support/catch_with_torch.hpp"

#include <torch/types.h>
#include <torch/nn/utils/clip_grad.h>

#include <future>
#include <thread>

#include "engine/optim/grad_clip.hpp"
#include "tests/train/optim/optim_test_support.hpp"

using namespace accel::engine;
using namespace accel::test;

namespace {

std::vector<at::Tensor> clones(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.clone());
  return out;
}

}  // namespace

TEST_CASE("clip: hand computation (3-4-5)", "[optim][clip]") {
  std::vector<at::Tensor> grads{at::tensor({3.0f}), at::tensor({0.0f, 4.0f})};
  CHECK(global_grad_norm(grads) == Approx(5.0).epsilon(1e-15));
  const double norm = clip_grad_norm(grads, 1.0);
  CHECK(norm == Approx(5.0).epsilon(1e-15));  // the reported norm is the pre-clip one
  CHECK(grads[0].item<float>() == Approx(3.0 / (5.0 + 1e-6)).epsilon(1e-7));
  CHECK(grads[1][1].item<float>() == Approx(4.0 / (5.0 + 1e-6)).epsilon(1e-7));
  CHECK(global_grad_norm(grads) == Approx(5.0 / (5.0 + 1e-6)).epsilon(1e-7));
}

TEST_CASE("clip: nothing changes at or below max_norm, or when disabled", "[optim][clip]") {
  std::vector<at::Tensor> grads{at::tensor({3.0f, 4.0f})};
  const auto before = clones(grads);
  CHECK(clip_gradients(grads, 5.0, 5.0) == 1.0);   // norm == max_norm: the spec scales only above
  CHECK(clip_gradients(grads, 5.0, 10.0) == 1.0);
  CHECK(clip_grad_norm(grads, 0.0) == Approx(5.0));  // max_grad_norm 0: report, never clip
  CHECK(at::equal(grads[0], before[0]));
  CHECK(clip_gradients(grads, 5.0, 2.0) == Approx(2.0 / (5.0 + 1e-6)).epsilon(1e-15));
}

TEST_CASE("clip: matches torch::nn::utils::clip_grad_norm_", "[optim][clip]") {
  auto params = make_params(21);
  for (double max_norm : {1.0, 1000.0}) {  // clipped, and left alone
    const auto grads = make_grads(params, 1, 22, 0.7)[0];
    auto ours = clones(grads);
    auto ref = clone_params(params);
    set_grads(ref, grads);
    std::vector<at::Tensor> ref_params;
    for (const auto& [n, p] : ref) ref_params.push_back(p);
    const double their_norm = torch::nn::utils::clip_grad_norm_(ref_params, max_norm);
    const double our_norm = clip_grad_norm(ours, max_norm);
    INFO("max_norm " << max_norm << ": ours " << our_norm << ", torch " << their_norm);
    CHECK(std::abs(our_norm - their_norm) <= 1e-6 * their_norm);
    for (size_t i = 0; i < ours.size(); ++i) CHECK(max_rel_error(ours[i], ref[i].second.grad(), 1e-6) <= 1e-6);
  }
}

TEST_CASE("clip: two ranks combining sums of squares equal one rank", "[optim][clip][ranks]") {
  auto params = make_params(23);
  const auto grads = make_grads(params, 1, 24)[0];
  const double single = global_grad_norm(grads);

  // Rank 0 holds the first three tensors and half of the fourth (a shard boundary inside a
  // tensor); rank 1 the rest. The hook is the all-reduce: each rank posts its local sum and waits
  // for the other's, in its own thread.
  std::vector<at::Tensor> r0(grads.begin(), grads.begin() + 3), r1(grads.begin() + 4, grads.end());
  const at::Tensor split = grads[3].reshape({-1});
  r0.push_back(split.narrow(0, 0, 100));
  r1.push_back(split.narrow(0, 100, split.numel() - 100));
  std::promise<double> post0, post1;
  auto got0 = post0.get_future().share(), got1 = post1.get_future().share();
  int calls0 = 0, calls1 = 0;
  auto rank0 = std::async(std::launch::async, [&] {
    return global_grad_norm(r0, [&](double local) { ++calls0; post0.set_value(local); return local + got1.get(); });
  });
  auto rank1 = std::async(std::launch::async, [&] {
    return global_grad_norm(r1, [&](double local) { ++calls1; post1.set_value(local); return got0.get() + local; });
  });
  const double n0 = rank0.get(), n1 = rank1.get();
  CHECK(n0 == n1);
  CHECK(std::abs(n0 - single) <= 1e-12 * single);
  CHECK(calls0 == 1);
  CHECK(calls1 == 1);
}

TEST_CASE("clip: a rank without gradients still joins the reduce", "[optim][clip][ranks]") {
  int calls = 0;
  const double norm = global_grad_norm({at::Tensor()}, [&](double local) {
    ++calls;
    CHECK(local == 0.0);
    return 16.0;  // the other ranks' share
  });
  CHECK(calls == 1);
  CHECK(norm == 4.0);
}

TEST_CASE("clip: fp64 accumulation for bf16 and chunked large gradients", "[optim][clip]") {
  // bf16 values are exact in fp64, so the norm is exact up to fp64 rounding.
  at::manual_seed(25);
  const at::Tensor g16 = at::randn({1000}).to(at::kBFloat16);
  const double exact = std::sqrt(g16.to(at::kDouble).square().sum().item<double>());
  CHECK(std::abs(global_grad_norm({g16}) - exact) <= 1e-14 * exact);
  // More than one 2^20-element chunk, and a non-contiguous view: 0.5^2 * n exactly.
  const int64_t n = (int64_t{1} << 20) + 12345;
  const at::Tensor big = at::full({2, n}, 0.5f).t();
  CHECK(global_grad_norm({big}) == std::sqrt(0.25 * 2 * n));
}

ACCEL_ASSERT_CHECK_IS_CATCH();
