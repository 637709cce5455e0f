// AdamW against libtorch's own torch::optim::AdamW (param groups: decay on 2-D parameters only),
// the 1-D decay exemption, flat-shard segments equal whole tensors, and the bf16 parameter path.
//
// Tolerance 1e-7 relative: adamw_step issues the very ATen calls torch::optim::AdamW issues, in the
// same order, with the same double scalars, so in practice the results are bit-identical; the only
// admissible difference is a last-ulp one if a kernel takes its scalar tail path for one tensor and
// its vectorised path for the other (fp32 ulp is 6e-8 relative).
#include "tests/support/catch_with_torch.hpp"

#include <torch/optim/adamw.h>

#include "engine/optim/adamw_step.hpp"
#include "engine/optim/optimizer.hpp"
#include "runtime/common/errors.hpp"
#include "tests/train/optim/optim_test_support.hpp"
#include "trainer/lr_schedule.hpp"

using namespace accel::train;
using namespace accel::engine;
using namespace accel::test;
using accel::config::OptimizerSection;

namespace {

OptimizerSection adamw_section() {
  OptimizerSection s;
  s.name = accel::config::OptimizerName::adamw;
  s.lr = 1e-2;
  s.weight_decay = 0.1;
  s.betas = {0.9, 0.95};
  s.eps = 1e-8;
  return s;
}

// torch::optim::AdamW over the same tensors, decay group (dim >= 2) and no-decay group.
std::unique_ptr<torch::optim::AdamW> torch_adamw(const NamedTensors& params, const OptimizerSection& s) {
  std::vector<at::Tensor> decay, no_decay;
  for (const auto& [name, p] : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto opts = torch::optim::AdamWOptions(s.lr).betas({s.betas[0], s.betas[1]}).eps(s.eps);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(opts.weight_decay(s.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(opts.weight_decay(0.0)));
  return std::make_unique<torch::optim::AdamW>(std::move(groups), opts);
}

// libtorch 2.11's C++ AdamW still moves the first moment as m*beta1 + g*(1-beta1) (torch 1.13's
// rounding); accel follows torch.optim.AdamW, the spec's reference, which uses lerp (one rounding
// fewer), and test_python_reference.cpp checks that against Python torch at 1e-6. With beta1 = 0
// both give m = g exactly, so the comparisons with the C++ optimizer below keep their 1e-7 bound
// and still check decay, the second moment, bias correction, eps and the update.
OptimizerSection adamw_section_without_momentum() {
  OptimizerSection s = adamw_section();
  s.betas = {0.0, 0.95};
  return s;
}

}  // namespace

TEST_CASE("adamw: Optimizer matches torch::optim::AdamW over 20 steps", "[optim][adamw]") {
  const auto section = adamw_section_without_momentum();
  auto ours = make_params(1);
  auto theirs = clone_params(ours);
  auto opt = Optimizer::make(section, ours);
  auto ref = torch_adamw(theirs, section);
  const auto grads = make_grads(ours, 20, 2);
  accel::config::SchedulerSection sched;  // cosine, warmup 10, floor 0.1
  sched.warmup_steps = 5;

  double worst = 0;
  for (int s = 0; s < 20; ++s) {
    const double lr = learning_rate(sched, section.lr, s, 20);
    set_grads(ours, grads[s]);
    set_grads(theirs, grads[s]);
    opt->step(lr);
    for (auto& group : ref->param_groups()) group.options().set_lr(lr);
    ref->step();
    for (size_t i = 0; i < ours.size(); ++i) worst = std::max(worst, max_rel_error(ours[i].second, theirs[i].second));
  }
  INFO("worst relative difference over 20 steps: " << worst);
  CHECK(worst <= 1e-7);
  CHECK(opt->step_count() == 20);
  // The moments match torch's state too.
  for (const auto& [key, t] : opt->state_tensors()) {
    if (key.rfind("exp_avg_sq.", 0) != 0) continue;
    const std::string name = key.substr(std::string("exp_avg_sq.").size());
    for (size_t i = 0; i < ours.size(); ++i) {
      if (ours[i].first != name) continue;
      auto& st = static_cast<torch::optim::AdamWParamState&>(
          *ref->state().at(theirs[i].second.unsafeGetTensorImpl()));
      CHECK(max_rel_error(t, st.exp_avg_sq(), 1e-12) <= 1e-7);
    }
  }
}

TEST_CASE("adamw: adamw_step on one tensor matches torch::optim::AdamW", "[optim][adamw]") {
  // Gradient scale 1e-6 makes sqrt(v_hat) comparable to eps, so where eps enters matters.
  for (double scale : {1.0, 1e-6}) {
    INFO("gradient scale " << scale);
    at::manual_seed(3);
    at::Tensor p = at::randn({37, 5}).requires_grad_(true);
    at::Tensor q = p.detach().clone().requires_grad_(true);
    at::Tensor m = at::zeros_like(p.detach()), v = at::zeros_like(p.detach());
    AdamWHyper h{3e-3, 0.0, 0.99, 1e-6, 0.05};  // beta1 0: see adamw_section_without_momentum
    torch::optim::AdamW ref(
        {q}, torch::optim::AdamWOptions(h.lr).betas({h.beta1, h.beta2}).eps(h.eps).weight_decay(h.weight_decay));
    for (int s = 1; s <= 20; ++s) {
      const at::Tensor g = at::randn({37, 5}) * scale;
      adamw_step(p, g, m, v, s, h, /*apply_decay=*/true);
      q.mutable_grad() = g.clone();
      ref.step();
    }
    CHECK(max_rel_error(p, q) <= 1e-7);
  }
}

TEST_CASE("adamw: weight decay skips 1-D parameters", "[optim][adamw]") {
  // Zero gradients leave m = v = 0, so the Adam term is 0 / (0 + eps) = 0: only decay moves p.
  auto params = make_params(4);
  const auto before = clone_params(params);
  auto opt = Optimizer::make(adamw_section(), params);
  std::vector<at::Tensor> zeros;
  for (const auto& [name, p] : params) zeros.push_back(at::zeros(p.sizes()));
  set_grads(params, zeros);
  opt->step(0.5);
  for (size_t i = 0; i < params.size(); ++i) {
    INFO(params[i].first);
    const at::Tensor& p = params[i].second;
    if (p.dim() >= 2)
      CHECK(at::equal(p.detach(), before[i].second.detach() * static_cast<float>(1 - 0.5 * 0.1)));
    else
      CHECK(at::equal(p.detach(), before[i].second.detach()));
  }
}

TEST_CASE("adamw: flat-shard segments update like whole tensors", "[optim][adamw][flat]") {
  // The ZeRO layout: all parameters concatenated into one flat fp32 buffer, split between two
  // ranks at an offset that cuts a tensor in two; each rank updates the segments it owns.
  const auto section = adamw_section();
  auto whole = make_params(5);
  auto opt = Optimizer::make(section, whole);
  std::vector<at::Tensor> flats;
  for (const auto& [n, p] : whole) flats.push_back(p.detach().reshape({-1}));
  at::Tensor flat = at::cat(flats);
  at::Tensor m = at::zeros_like(flat), v = at::zeros_like(flat);
  const int64_t cut = 16 * 8 + 8 + 3;  // inside h.0.ln_1.bias
  const auto grads = make_grads(whole, 6, 6);
  for (int s = 0; s < 6; ++s) {
    set_grads(whole, grads[s]);
    opt->step(section.lr);
    std::vector<at::Tensor> gflat;
    for (const auto& g : grads[s]) gflat.push_back(g.reshape({-1}));
    const at::Tensor g = at::cat(gflat);
    const AdamWHyper h = AdamWHyper::from(section, section.lr);
    for (const auto& [lo, hi] : {std::pair<int64_t, int64_t>{0, cut}, {cut, flat.numel()}}) {  // two "ranks"
      int64_t offset = 0;
      for (const auto& [name, p] : whole) {
        const int64_t a = std::max(lo, offset), b = std::min(hi, offset + p.numel());
        if (a < b)
          adamw_step(flat.narrow(0, a, b - a), g.narrow(0, a, b - a), m.narrow(0, a, b - a), v.narrow(0, a, b - a),
                     s + 1, h, applies_weight_decay(p));
        offset += p.numel();
      }
    }
  }
  std::vector<at::Tensor> after;
  for (const auto& [n, p] : whole) after.push_back(p.detach().reshape({-1}));
  CHECK(max_rel_error(flat, at::cat(after)) <= 1e-7);
}

TEST_CASE("adamw: bf16 parameters keep fp32 state and round once per step", "[optim][adamw][bf16]") {
  auto params = make_params(7, at::kBFloat16);
  auto opt = Optimizer::make(adamw_section(), params);
  for (const auto& [key, t] : opt->state_tensors())
    if (key.rfind("exp_avg", 0) == 0) CHECK(t.scalar_type() == at::kFloat);

  // Reference: the same update on an fp32 copy of the bf16 values, rounded to bf16 after each step.
  auto ref = clone_params(params);
  std::vector<at::Tensor> m, v;
  for (const auto& [n, p] : ref) {
    m.push_back(at::zeros(p.sizes()));
    v.push_back(at::zeros(p.sizes()));
  }
  const auto grads = make_grads(params, 5, 8);
  const AdamWHyper h = AdamWHyper::from(adamw_section(), 1e-2);
  for (int s = 0; s < 5; ++s) {
    set_grads(params, grads[s]);  // bf16 grads
    opt->step(1e-2);
    for (size_t i = 0; i < ref.size(); ++i) {
      at::Tensor p32 = ref[i].second.detach().to(at::kFloat);
      adamw_step(p32, grads[s][i].to(at::kBFloat16), m[i], v[i], s + 1, h, ref[i].second.dim() >= 2);
      ref[i].second.detach().copy_(p32);
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    INFO(params[i].first);
    CHECK(params[i].second.scalar_type() == at::kBFloat16);
    CHECK(at::equal(params[i].second.detach(), ref[i].second.detach()));
  }
}

TEST_CASE("adamw: mismatched state is rejected", "[optim][adamw]") {
  at::Tensor p = at::zeros({4, 2});
  at::Tensor g = at::zeros({4, 2});
  AdamWHyper h;
  CHECK_THROWS_AS(adamw_step(p, g, at::zeros({8}), at::zeros({4, 2}), 1, h, true), std::invalid_argument);
  CHECK_THROWS_AS(adamw_step(p, g, at::zeros({4, 2}, at::kBFloat16), at::zeros({4, 2}), 1, h, true),
                  std::invalid_argument);
  CHECK_THROWS_AS(adamw_step(p, at::zeros({3}), at::zeros({4, 2}), at::zeros({4, 2}), 1, h, true),
                  std::invalid_argument);
  CHECK_THROWS_AS(adamw_step(p, g, at::zeros({4, 2}), at::zeros({4, 2}), 0, h, true), std::invalid_argument);
  OptimizerSection bad = adamw_section();
  bad.betas = {0.9};
  CHECK_THROWS_AS(Optimizer::make(bad, make_params(1)), accel::ConfigError);
}

ACCEL_ASSERT_CHECK_IS_CATCH();
