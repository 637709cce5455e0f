// Fused AdamW (at::_fused_adamw_, optimizer.fused) against the elementwise reference adamw_step:
// lists of tensors and shard segments, the replicated Optimizer with fused on and off, the
// fallback for bf16 parameters (fp32 states: not one dtype), and the auto rule.
//
// Tolerance 2e-6 relative (floor 1e-3) after 20 steps: the kernel evaluates torch.optim.AdamW's
// formula in another order (one fused expression per element in fp32), so each step may differ
// from the reference by an ulp or two (6e-8 relative each); the moments carry those differences
// forward, so they add up over the steps, damped by the betas. torch's own fused and for-loop
// AdamW differ by 4.4e-7 relative over 50 steps on random data (torch 2.11 on this machine).
#include "tests/support/catch_with_torch.hpp"

#include "engine/optim/adamw_fused.hpp"
#include "engine/optim/adamw_step.hpp"
#include "engine/optim/optimizer.hpp"
#include "tests/train/optim/optim_test_support.hpp"

using namespace accel::engine;
using namespace accel::test;

namespace {

constexpr double kFusedTolerance = 2e-6;

AdamWHyper hyper() {
  AdamWHyper h;
  h.lr = 1e-2;
  h.beta1 = 0.9;
  h.beta2 = 0.95;
  h.eps = 1e-8;
  h.weight_decay = 0.1;
  return h;
}

OptimizerSetup two_group_setup(bool fused) {
  accel::config::OptimizerSection s;
  s.lr = 1e-2;
  s.betas = {0.9, 0.95};
  s.fused = fused ? accel::config::FusedKernel::yes : accel::config::FusedKernel::no;
  return builtin_optimizer_setup(s);
}

}  // namespace

TEST_CASE("fused adamw: a list of tensors and slices stays within 2e-6 of adamw_step over 20 steps", "[optim][fused]") {
  at::manual_seed(3);
  // Whole tensors and two segments of one flat buffer (a unit's shard), as the engines pass them.
  at::Tensor flat = at::randn({500});
  std::vector<at::Tensor> ref{at::randn({37, 11}), at::randn({64}), flat.narrow(0, 0, 200), flat.narrow(0, 200, 300)};
  at::Tensor flat_fused = flat.clone();
  std::vector<at::Tensor> fused{ref[0].clone(), ref[1].clone(), flat_fused.narrow(0, 0, 200), flat_fused.narrow(0, 200, 300)};
  std::vector<at::Tensor> m_ref, v_ref, m_fused, v_fused;
  for (const auto& t : ref) {
    m_ref.push_back(at::zeros_like(t));
    v_ref.push_back(at::zeros_like(t));
    m_fused.push_back(at::zeros_like(t));
    v_fused.push_back(at::zeros_like(t));
  }
  bool identical = true;
  for (int64_t step = 1; step <= 20; ++step) {
    AdamWBatch batch;
    for (size_t i = 0; i < ref.size(); ++i) {
      at::Tensor g = at::randn(ref[i].sizes());
      adamw_step(ref[i], g, m_ref[i], v_ref[i], step, hyper(), /*apply_decay=*/true);
      batch.add(fused[i], g, m_fused[i], v_fused[i], step);
    }
    adamw_fused_step(batch, hyper());
  }
  for (size_t i = 0; i < ref.size(); ++i) {
    CHECK(max_rel_error(fused[i], ref[i]) < kFusedTolerance);
    CHECK(max_rel_error(m_fused[i], m_ref[i]) < kFusedTolerance);
    CHECK(max_rel_error(v_fused[i], v_ref[i], 1e-6) < kFusedTolerance);
    identical = identical && at::equal(fused[i], ref[i]);
  }
  // The kernel really ran: its rounding differs from the reference somewhere in 1,000 values.
  CHECK_FALSE(identical);
}

TEST_CASE("fused adamw: the Optimizer with fused on tracks fused off; bf16 parameters fall back bit for bit",
          "[optim][fused]") {
  SECTION("fp32 parameters: one fused launch per group, within the tolerance") {
    NamedTensors plain = make_params(7), fused = clone_params(plain);
    std::vector<int> group_of;
    for (const auto& [name, p] : plain) group_of.push_back(builtin_param_group(p.dim()));
    auto a = Optimizer::make(two_group_setup(false), plain, group_of);
    auto b = Optimizer::make(two_group_setup(true), fused, group_of);
    for (const auto& grads : make_grads(plain, 20, 11)) {
      set_grads(plain, grads);
      set_grads(fused, grads);
      a->step(1e-2);
      b->step(1e-2);
    }
    for (size_t i = 0; i < plain.size(); ++i) CHECK(max_rel_error(fused[i].second, plain[i].second) < kFusedTolerance);
    CHECK(b->step_count() == 20);
  }
  SECTION("bf16 parameters keep fp32 states: the elementwise path, identical to fused off") {
    NamedTensors plain = make_params(7, at::kBFloat16), fused = clone_params(plain);
    std::vector<int> group_of(plain.size(), 0);
    auto a = Optimizer::make(two_group_setup(false), plain, group_of);
    auto b = Optimizer::make(two_group_setup(true), fused, group_of);
    for (const auto& grads : make_grads(plain, 5, 11)) {
      set_grads(plain, grads);
      set_grads(fused, grads);
      a->step(1e-2);
      b->step(1e-2);
    }
    for (size_t i = 0; i < plain.size(); ++i) CHECK(at::equal(fused[i].second, plain[i].second));
  }
}

TEST_CASE("fused adamw: refusals and the auto rule", "[optim][fused]") {
  AdamWBatch batch;
  batch.add(at::zeros({4}, at::kBFloat16), at::zeros({4}), at::zeros({4}), at::zeros({4}), 1);
  CHECK_THROWS_AS(adamw_fused_step(batch, hyper()), std::invalid_argument);
  AdamWBatch zero_step;
  zero_step.add(at::zeros({4}), at::zeros({4}), at::zeros({4}), at::zeros({4}), 0);
  CHECK_THROWS_AS(adamw_fused_step(zero_step, hyper()), std::invalid_argument);
  // Non-contiguous parameters (strided, transposed) are not the kernel's: the elementwise path
  // takes them, since their states are contiguous and the kernel pairs elements by memory order.
  CHECK_FALSE(fused_adamw_applies(at::zeros({8}).slice(0, 0, 8, 2), at::zeros({4})));
  CHECK_FALSE(fused_adamw_applies(at::zeros({4, 2}).t(), at::zeros({2, 4})));
  CHECK(fused_adamw_applies(at::zeros({2, 4}), at::zeros({2, 4})));
  using accel::config::FusedKernel;
  CHECK(use_fused_adamw(FusedKernel::auto_, /*on_gpu=*/true));
  CHECK_FALSE(use_fused_adamw(FusedKernel::auto_, /*on_gpu=*/false));
  CHECK(use_fused_adamw(FusedKernel::yes, false));
  CHECK_FALSE(use_fused_adamw(FusedKernel::no, true));
  CHECK(two_group_setup(true).fused);
  CHECK_FALSE(builtin_optimizer_setup(accel::config::OptimizerSection{}).fused);  // auto without a device: off
}
