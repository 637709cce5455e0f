// accel's optimizer pipeline (schedule -> clip -> AdamW with decay on 2-D parameters) against
// Debian's Python torch 1.13 running adamw_reference.py on the same initial parameters and
// gradients for 10 steps. Data crosses in JSON as doubles, so fp32 values are exact on both sides.
// Tolerance 1e-6 relative: the AdamW ops are the same as torch's, but the clip factor is formed in
// fp64 here and fp32 there (spec rule vs torch's clamp agree away from norm == max_norm, and the
// gradient scales below keep every norm far from it); that ~1e-7 relative difference in clipped
// gradients reaches the parameters scaled down by lr.
// Needs accel's Python environment (scripts/setup.sh; CMake's ACCEL_PYTHON), or ACCEL_PYTHON naming another one.
#include "tests/support/catch_with_torch.hpp"

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/optim/grad_clip.hpp"
#include "engine/optim/optimizer.hpp"
#include "tests/support/run_command.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/train/optim/optim_test_support.hpp"
#include "trainer/lr_schedule.hpp"

using namespace accel::train;
using namespace accel::engine;
using namespace accel::test;
using nlohmann::json;

namespace {

json to_json(const at::Tensor& t) {
  const at::Tensor flat = t.detach().to(at::kDouble).contiguous().reshape({-1});
  return std::vector<double>(flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
}

at::Tensor from_json(const json& values, at::IntArrayRef shape) {
  const auto v = values.get<std::vector<double>>();
  return at::tensor(v, at::kDouble).to(at::kFloat).reshape(shape);
}

std::string python() {
  const char* env = std::getenv("ACCEL_PYTHON");
  return env && *env ? env : ACCEL_TEST_PYTHON;
}

}  // namespace

TEST_CASE("python reference: 10 AdamW steps with schedule and clipping match torch.optim.AdamW",
          "[optim][python]") {
  constexpr int kSteps = 10;
  accel::config::OptimizerSection opt_section;  // adamw, betas (0.9, 0.95), eps 1e-8
  opt_section.lr = 1e-2;
  opt_section.weight_decay = 0.1;
  accel::config::SchedulerSection sched;  // cosine
  sched.warmup_steps = 3;
  sched.min_lr_ratio = 0.1;
  const double max_grad_norm = 1.0;

  auto params = make_params(41);
  const auto initial = clone_params(params);
  auto grads = make_grads(params, kSteps, 42, 0.05);  // 656 elements: global norm ~1.3
  for (int s = 0; s < kSteps; ++s)
    for (auto& g : grads[s]) g.mul_(s % 2 ? 0.5 : 2.0);  // alternately well below and above max_norm

  json c;
  c["lr"] = opt_section.lr;
  c["weight_decay"] = opt_section.weight_decay;
  c["betas"] = opt_section.betas;
  c["eps"] = opt_section.eps;
  c["warmup_steps"] = sched.warmup_steps;
  c["min_lr_ratio"] = sched.min_lr_ratio;
  c["total_steps"] = kSteps;
  c["max_grad_norm"] = max_grad_norm;
  for (const auto& [name, p] : params) c["params"].push_back({{"name", name}, {"shape", p.sizes().vec()}, {"data", to_json(p)}});
  for (const auto& step : grads) {
    json row = json::array();
    for (const auto& g : step) row.push_back(to_json(g));
    c["grads"].push_back(row);
  }
  TempDir dir;
  const std::string case_path = dir.write("case.json", c.dump());
  const std::string result_path = (dir.path() / "result.json").string();
  const std::string script = std::string(ACCEL_SOURCE_DIR) + "/tests/train/optim/adamw_reference.py";
  const auto run = run_command(shell_quote(python()) + " " + shell_quote(script) + " " + shell_quote(case_path) +
                               " " + shell_quote(result_path));
  INFO("reference script output:\n" << run.output);
  REQUIRE(run.exit_code == 0);  // no torch in that Python? run scripts/setup.sh or set ACCEL_PYTHON
  const json r = json::parse(read_file(result_path));
  INFO("python torch " << r.value("torch_version", std::string("?")));

  // Our side of the same run.
  auto opt = Optimizer::make(opt_section, params);
  std::vector<at::Tensor> live_grads;
  int clipped = 0;
  for (int s = 0; s < kSteps; ++s) {
    set_grads(params, grads[s]);
    live_grads.clear();
    for (const auto& [n, p] : params) live_grads.push_back(p.grad());
    const double norm = clip_grad_norm(live_grads, max_grad_norm);
    const double lr = learning_rate(sched, opt_section.lr, s, kSteps);
    opt->step(lr);
    clipped += norm > max_grad_norm;
    INFO("step " << s << ": norm " << norm << " vs " << r["grad_norms"][s].get<double>());
    CHECK(std::abs(lr - r["lrs"][s].get<double>()) <= 1e-15 * lr);
    CHECK(std::abs(norm - r["grad_norms"][s].get<double>()) <= 1e-6 * norm);
    CHECK(std::abs(norm - max_grad_norm) > 1e-3);  // far from the one place the clip rules differ
  }
  CHECK(clipped > 0);
  CHECK(clipped < kSteps);

  double worst = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, p] = params[i];
    const at::Tensor theirs = from_json(r["params"][name], p.sizes());
    worst = std::max(worst, max_rel_error(p, theirs));
    CHECK_FALSE(at::equal(p, initial[i].second));  // every parameter moved
  }
  INFO("worst relative parameter difference: " << worst);
  CHECK(worst <= 1e-6);
}

ACCEL_ASSERT_CHECK_IS_CATCH();
