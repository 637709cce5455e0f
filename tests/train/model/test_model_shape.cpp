// The memory estimator's torch-free unit sizes (runtime/estimate/model_shape.hpp) against the units
// the trainer's engine runs: api::apply_unit_policy on GptModule and MlpModule under the job's unit
// policy (api::job_unit_policy), for every fsdp wrap policy and for the other backends: same units,
// same order, same parameter count per unit, the tied unit the one holding wte.
#include "tests/support/catch_with_torch.hpp"

#include "api/prepared_units.hpp"
#include "api/unit_policy.hpp"
#include "runtime/config/plan/resolve_plan.hpp"
#include "runtime/estimate/model_shape.hpp"
#include "tests/train/model/model_test_support.hpp"

using accel::config::AutoWrapPolicy;
using accel::config::Backend;
using accel::test::gpt_section;
using accel::test::llama_section;
using accel::test::mlp_section;

namespace {

// The job's units of the built-in module, as Accelerator::prepare makes them.
std::vector<accel::api::PolicyUnit> module_units(const accel::config::JobConfig& job, accel::train::BuiltinModule& model) {
  accel::config::LoadedJob loaded;
  loaded.job = job;
  const auto resolved = accel::plan::resolve_plan(job, accel::plan::ModelFacts::user(/*unit_boundaries=*/true));
  return accel::api::apply_unit_policy(model, accel::api::job_unit_policy(loaded, resolved, model));
}

void check_same_units(const accel::config::ModelSection& section, Backend backend, AutoWrapPolicy wrap,
                      int64_t min_num_params = 0) {
  accel::config::JobConfig job;
  job.model = section;
  job.backend = backend;
  job.fsdp.auto_wrap_policy = wrap;
  if (min_num_params > 0) job.fsdp.min_num_params = min_num_params;
  CAPTURE(accel::config::to_string(section.name), accel::config::to_string(backend), accel::config::to_string(wrap),
          min_num_params);
  auto model = accel::train::make_builtin_module(section);
  const auto units = module_units(job, *model);
  const auto shape = backend == Backend::fsdp ? accel::estimate::model_shape(section, wrap, job.fsdp.min_num_params)
                                              : accel::estimate::model_shape(section);
  REQUIRE(units.size() == shape.units.size());
  int64_t total = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    int64_t numel = 0;
    for (const auto& [name, p] : units[u].params) numel += p.numel();
    total += numel;
    INFO(units[u].name);
    CHECK(units[u].name == shape.units[u].name);
    CHECK(numel == shape.units[u].numel);
  }
  CHECK(total == shape.num_parameters());
  REQUIRE(shape.tied_unit >= 0);
  bool holds_wte = false;  // wte (llama: embed_tokens) is used by the output head too, or starts the forward
  for (const auto& [name, p] : units[size_t(shape.tied_unit)].params)
    holds_wte = holds_wte || name == "wte.weight" || name == "embed_tokens.weight";
  CHECK(holds_wte);
}

void check_every_policy(const accel::config::ModelSection& section) {
  check_same_units(section, Backend::ddp, AutoWrapPolicy::TRANSFORMER_BASED_WRAP);
  check_same_units(section, Backend::deepspeed, AutoWrapPolicy::TRANSFORMER_BASED_WRAP);
  check_same_units(section, Backend::fsdp, AutoWrapPolicy::TRANSFORMER_BASED_WRAP);
  check_same_units(section, Backend::fsdp, AutoWrapPolicy::NO_WRAP);
  // The size rule at bounds that pick every module outside the layers, some of them, and none.
  for (int64_t min : {int64_t(1), int64_t(2 * section.n_embd + 1), int64_t(section.vocab_size) * section.n_embd,
                      int64_t(1) << 40})
    check_same_units(section, Backend::fsdp, AutoWrapPolicy::SIZE_BASED_WRAP, min);
}

}  // namespace

TEST_CASE("estimator unit sizes equal the gpt module's units under every wrap policy", "[model][gpt][estimate]") {
  check_every_policy(gpt_section(/*n_layer=*/2, /*n_head=*/2, /*n_embd=*/16, /*vocab=*/32, /*block=*/8));
  check_every_policy(gpt_section(/*n_layer=*/3, /*n_head=*/4, /*n_embd=*/40, /*vocab=*/257, /*block=*/13));
  check_every_policy(gpt_section(/*n_layer=*/1, /*n_head=*/1, /*n_embd=*/7, /*vocab=*/5, /*block=*/3));
}

TEST_CASE("estimator unit sizes equal the mlp module's units under every wrap policy", "[model][mlp][estimate]") {
  check_every_policy(mlp_section(/*n_layer=*/3, /*n_embd=*/16, /*vocab=*/32));
  check_every_policy(mlp_section(/*n_layer=*/1, /*n_embd=*/9, /*vocab=*/300));
}

TEST_CASE("estimator unit sizes equal the llama module's units under every wrap policy", "[model][llama][estimate]") {
  check_every_policy(llama_section(/*n_layer=*/2));
  check_every_policy(llama_section(/*n_layer=*/3, /*tied=*/true, /*biases=*/true));
  auto odd = llama_section(1);
  odd.head_dim = 6;  // not n_embd / n_head
  odd.n_kv_head = 1;
  odd.vocab_size = 37;
  check_every_policy(odd);
}

TEST_CASE("the layout: gpt's root holds wte, wpe and ln_f; the size rule splits off the tables", "[model][estimate]") {
  const auto gpt = gpt_section(/*n_layer=*/2, /*n_head=*/2, /*n_embd=*/16, /*vocab=*/32, /*block=*/8);
  auto names = [](const accel::estimate::ModelShape& shape) {
    std::vector<std::string> out;
    for (const auto& u : shape.units) out.push_back(u.name);
    return out;
  };
  const auto plain = accel::estimate::model_shape(gpt);
  CHECK(names(plain) == std::vector<std::string>{"root", "h.0", "h.1"});
  CHECK(plain.units[0].numel == 32 * 16 + 8 * 16 + 2 * 16);
  CHECK(plain.tied_unit == 0);
  // wte (512) at the bound, wpe (128) and ln_f (32) below it: the root keeps those two.
  const auto sized = accel::estimate::model_shape(gpt, AutoWrapPolicy::SIZE_BASED_WRAP, 512);
  CHECK(names(sized) == std::vector<std::string>{"root", "wte", "h.0", "h.1"});
  CHECK(sized.tied_unit == 1);
  const auto split = accel::estimate::model_shape(gpt, AutoWrapPolicy::SIZE_BASED_WRAP, 1);
  CHECK(names(split) == std::vector<std::string>{"wte", "wpe", "h.0", "h.1", "ln_f"});  // nothing left for a root
  CHECK(split.tied_unit == 0);
}
