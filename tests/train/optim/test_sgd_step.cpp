// SGD with momentum against libtorch's torch::optim::SGD (L2 weight decay on 2-D parameters only,
// dampening 0), with and without momentum, plus the bf16 path and the untouched gradient.
// Tolerance 1e-7 relative, for the reason given in test_adamw_step.cpp (same ops, same order).
#include "tests/support/catch_with_torch.hpp"

#include <torch/optim/sgd.h>

#include "engine/optim/optimizer.hpp"
#include "engine/optim/sgd_step.hpp"
#include "tests/train/optim/optim_test_support.hpp"

using namespace accel::engine;
using namespace accel::test;
using accel::config::OptimizerSection;

namespace {

OptimizerSection sgd_section(double momentum) {
  OptimizerSection s;
  s.name = accel::config::OptimizerName::sgd;
  s.lr = 0.05;
  s.weight_decay = 0.01;
  s.momentum = momentum;
  return s;
}

std::unique_ptr<torch::optim::SGD> torch_sgd(const NamedTensors& params, const OptimizerSection& s) {
  std::vector<at::Tensor> decay, no_decay;
  for (const auto& [name, p] : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto opts = torch::optim::SGDOptions(s.lr).momentum(s.momentum);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::SGDOptions>(opts.weight_decay(s.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::SGDOptions>(opts.weight_decay(0.0)));
  return std::make_unique<torch::optim::SGD>(std::move(groups), opts);
}

double run_against_torch(double momentum) {
  const auto section = sgd_section(momentum);
  auto ours = make_params(11);
  auto theirs = clone_params(ours);
  auto opt = Optimizer::make(section, ours);
  auto ref = torch_sgd(theirs, section);
  const auto grads = make_grads(ours, 15, 12);
  double worst = 0;
  for (int s = 0; s < 15; ++s) {
    const double lr = section.lr * (1.0 - s / 30.0);  // a changing rate, as a schedule gives
    set_grads(ours, grads[s]);
    set_grads(theirs, grads[s]);
    opt->step(lr);
    for (auto& group : ref->param_groups()) group.options().set_lr(lr);
    ref->step();
    for (size_t i = 0; i < ours.size(); ++i) worst = std::max(worst, max_rel_error(ours[i].second, theirs[i].second));
  }
  return worst;
}

}  // namespace

TEST_CASE("sgd: momentum 0.9 matches torch::optim::SGD over 15 steps", "[optim][sgd]") {
  const double worst = run_against_torch(0.9);
  INFO("worst relative difference: " << worst);
  CHECK(worst <= 1e-7);
}

TEST_CASE("sgd: momentum 0 matches torch::optim::SGD and keeps no buffer", "[optim][sgd]") {
  const double worst = run_against_torch(0.0);
  INFO("worst relative difference: " << worst);
  CHECK(worst <= 1e-7);
  auto opt = Optimizer::make(sgd_section(0.0), make_params(1));
  for (const auto& [key, t] : opt->state_tensors()) CHECK(key.rfind("momentum.", 0) != 0);
}

TEST_CASE("sgd: first step copies d into the buffer, then buf = m*buf + d", "[optim][sgd]") {
  at::Tensor p = at::full({2, 2}, 1.0f);
  at::Tensor buf = at::full({2, 2}, 123.0f);  // stale content must not leak into step 1
  const at::Tensor g = at::full({2, 2}, 0.5f);
  SgdHyper h{0.1, 0.9, 0.2};
  sgd_step(p, g, buf, 1, h, /*apply_decay=*/true);
  // d = 0.5 + 0.2 * 1 = 0.7; buf = 0.7; p = 1 - 0.1 * 0.7 = 0.93
  CHECK(buf[0][0].item<float>() == Approx(0.7f).epsilon(1e-6));
  CHECK(p[0][0].item<float>() == Approx(0.93f).epsilon(1e-6));
  CHECK(at::equal(g, at::full({2, 2}, 0.5f)));  // the gradient itself is untouched
  sgd_step(p, g, buf, 2, h, true);
  // d = 0.5 + 0.2 * 0.93 = 0.686; buf = 0.9 * 0.7 + 0.686 = 1.316; p = 0.93 - 0.1316 = 0.7984
  CHECK(buf[0][0].item<float>() == Approx(1.316f).epsilon(1e-6));
  CHECK(p[0][0].item<float>() == Approx(0.7984f).epsilon(1e-6));
}

TEST_CASE("sgd: bf16 parameters keep an fp32 momentum buffer", "[optim][sgd][bf16]") {
  auto params = make_params(13, at::kBFloat16);
  auto opt = Optimizer::make(sgd_section(0.9), params);
  const auto grads = make_grads(params, 3, 14);
  for (int s = 0; s < 3; ++s) {
    set_grads(params, grads[s]);
    opt->step(0.05);
  }
  for (const auto& [key, t] : opt->state_tensors())
    if (key.rfind("momentum.", 0) == 0) CHECK(t.scalar_type() == at::kFloat);
  for (const auto& [name, p] : params) CHECK(p.scalar_type() == at::kBFloat16);
}

ACCEL_ASSERT_CHECK_IS_CATCH();
