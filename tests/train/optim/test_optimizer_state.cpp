// Optimizer state for checkpoints: the key set, a save/load round trip that continues bit-identically,
// per-parameter step counts (a parameter without a gradient is skipped), all-or-nothing loading
// that names what does not fit, zero_grad, and construction errors.
#include "tests/support/catch_with_torch.hpp"

#include <set>

#include "engine/optim/optimizer.hpp"
#include "runtime/common/errors.hpp"
#include "tests/train/optim/optim_test_support.hpp"

using namespace accel::engine;
using namespace accel::test;
using accel::config::OptimizerName;
using accel::config::OptimizerSection;

namespace {

OptimizerSection section_for(OptimizerName name) {
  OptimizerSection s;
  s.name = name;
  s.lr = 1e-2;
  return s;
}

NamedTensors cloned_state(const Optimizer& opt) {
  NamedTensors out;
  for (const auto& [k, t] : opt.state_tensors()) out.emplace_back(k, t.clone());
  return out;
}

int64_t state_int(const Optimizer& opt, const std::string& key) {
  for (const auto& [k, t] : opt.state_tensors())
    if (k == key) return t.item<int64_t>();
  FAIL("no state key " << key);
  return -1;
}

}  // namespace

TEST_CASE("optimizer state: key names", "[optim][state]") {
  auto adamw = Optimizer::make(section_for(OptimizerName::adamw), make_params(31));
  std::set<std::string> keys;
  for (const auto& [k, t] : adamw->state_tensors()) keys.insert(k);
  CHECK(keys.size() == 1 + 3 * gpt_like_shapes().size());
  CHECK(keys.count("step_count"));
  CHECK(keys.count("step.wte.weight"));
  CHECK(keys.count("exp_avg.h.0.attn.c_attn.weight"));
  CHECK(keys.count("exp_avg_sq.ln_f.weight"));

  auto sgd = Optimizer::make(section_for(OptimizerName::sgd), make_params(31));  // momentum 0.9 by default
  keys.clear();
  for (const auto& [k, t] : sgd->state_tensors()) keys.insert(k);
  CHECK(keys.size() == 1 + 2 * gpt_like_shapes().size());
  CHECK(keys.count("momentum.h.0.mlp.c_fc.bias"));
}

TEST_CASE("optimizer state: round trip continues identically", "[optim][state]") {
  for (auto kind : {OptimizerName::adamw, OptimizerName::sgd}) {
    INFO(accel::config::to_string(kind));
    const auto section = section_for(kind);
    auto a_params = make_params(32);
    auto a = Optimizer::make(section, a_params);
    const auto grads = make_grads(a_params, 6, 33);
    for (int s = 0; s < 5; ++s) {
      set_grads(a_params, grads[s]);
      a->step(1e-2);
    }
    // "Checkpoint": copies of the parameters and of the optimizer state; a fresh optimizer loads them.
    auto b_params = clone_params(a_params);
    auto b = Optimizer::make(section, b_params);
    b->load_state(cloned_state(*a));
    CHECK(b->step_count() == 5);

    set_grads(a_params, grads[5]);
    set_grads(b_params, grads[5]);
    a->step(7e-3);
    b->step(7e-3);
    for (size_t i = 0; i < a_params.size(); ++i) CHECK(at::equal(a_params[i].second, b_params[i].second));
    const auto sa = a->state_tensors(), sb = b->state_tensors();
    REQUIRE(sa.size() == sb.size());
    for (size_t i = 0; i < sa.size(); ++i) {
      CHECK(sa[i].first == sb[i].first);
      CHECK(at::equal(sa[i].second, sb[i].second));
    }
  }
}

TEST_CASE("optimizer state: parameters without a gradient are skipped", "[optim][state]") {
  auto params = make_params(34);
  const auto before = clone_params(params);
  auto opt = Optimizer::make(section_for(OptimizerName::adamw), params);
  auto grads = make_grads(params, 1, 35)[0];
  set_grads(params, grads);
  params[1].second.mutable_grad() = at::Tensor();  // h.0.ln_1.weight: no gradient this step
  opt->step(1e-2);
  CHECK(opt->step_count() == 1);
  CHECK(state_int(*opt, "step.wte.weight") == 1);
  CHECK(state_int(*opt, "step.h.0.ln_1.weight") == 0);
  CHECK(at::equal(params[1].second, before[1].second));
  CHECK_FALSE(at::equal(params[0].second, before[0].second));
}

TEST_CASE("optimizer state: loading what does not fit changes nothing", "[optim][state]") {
  auto params = make_params(36);
  auto opt = Optimizer::make(section_for(OptimizerName::adamw), params);
  set_grads(params, make_grads(params, 1, 37)[0]);
  opt->step(1e-2);
  const auto good = cloned_state(*opt);

  auto expect_rejected = [&](NamedTensors state, const std::string& says) {
    try {
      opt->load_state(state);
      FAIL("load_state accepted bad state; expected: " << says);
    } catch (const accel::RunError& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(says) != std::string::npos);
    }
    CHECK(opt->step_count() == 1);
    const auto now = opt->state_tensors();
    for (size_t i = 0; i < now.size(); ++i) CHECK(at::equal(now[i].second, good[i].second));
  };

  auto missing = good;
  missing.pop_back();
  expect_rejected(missing, "missing: exp_avg_sq.ln_f.weight");

  auto extra = good;
  extra.emplace_back("exp_avg.lm_head.weight", at::zeros({2}));
  expect_rejected(extra, "unexpected: exp_avg.lm_head.weight");

  auto reshaped = good;
  for (auto& [k, t] : reshaped) {
    if (k == "exp_avg.wte.weight") t = at::zeros({8, 16});
    if (k == "step_count") t = at::full({}, 99);  // corrupt a value we would otherwise restore
  }
  expect_rejected(reshaped, "wrong shape or dtype: exp_avg.wte.weight");

  auto wrong_dtype = good;
  for (auto& [k, t] : wrong_dtype)
    if (k == "exp_avg.wte.weight") t = t.to(at::kBFloat16);
  expect_rejected(wrong_dtype, "wrong shape or dtype: exp_avg.wte.weight");

  auto sgd = Optimizer::make(section_for(OptimizerName::sgd), make_params(36));
  expect_rejected(cloned_state(*sgd), "momentum.");  // another optimizer's state

  auto duplicated = good;
  duplicated.push_back(good.front());
  expect_rejected(duplicated, "duplicate keys: step_count");
}

TEST_CASE("optimizer: zero_grad and construction errors", "[optim][state]") {
  auto params = make_params(38);
  auto opt = Optimizer::make(section_for(OptimizerName::adamw), params);
  set_grads(params, make_grads(params, 1, 39)[0]);
  const at::Tensor grad_storage = params[0].second.grad();
  opt->zero_grad();
  CHECK(params[0].second.grad().is_same(grad_storage));  // zeroed in place, not replaced
  CHECK(params[0].second.grad().abs().sum().item<float>() == 0.0f);

  CHECK_THROWS_AS(Optimizer::make(section_for(OptimizerName::adamw), {}), std::invalid_argument);
  NamedTensors dup{{"w", at::zeros({2, 2})}, {"w", at::zeros({2})}};
  CHECK_THROWS_AS(Optimizer::make(section_for(OptimizerName::adamw), dup), std::invalid_argument);
  NamedTensors ints{{"w", at::zeros({2, 2}, at::kLong)}};
  CHECK_THROWS_AS(Optimizer::make(section_for(OptimizerName::adamw), ints), std::invalid_argument);
}

ACCEL_ASSERT_CHECK_IS_CATCH();
