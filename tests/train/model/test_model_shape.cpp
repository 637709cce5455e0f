// The memory estimator's torch-free unit sizes (runtime/estimate/model_shape.hpp) against the real
// models: same units, same order, same parameter count per unit, for a few dimension sets.
#include "tests/support/catch_with_torch.hpp"

#include "runtime/estimate/model_shape.hpp"
#include "tests/train/model/model_test_support.hpp"

using accel::test::gpt_section;
using accel::test::mlp_section;

namespace {

void check_same_units(const accel::config::ModelSection& section) {
  auto model = accel::train::make_model(section);
  auto shape = accel::estimate::model_shape(section);
  auto units = model->units();
  REQUIRE(units.size() == shape.units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    int64_t numel = 0;
    for (const auto& [name, p] : units[u]->named_parameters_in_order()) numel += p.numel();
    INFO(units[u]->unit_name());
    CHECK(units[u]->unit_name() == shape.units[u].name);
    CHECK(numel == shape.units[u].numel);
  }
  CHECK(model->num_parameters() == shape.num_parameters());
  REQUIRE(shape.tied_unit >= 0);
  CHECK(units[size_t(shape.tied_unit)]->unit_name() == "embedding");  // holds wte, used by the output head
}

}  // namespace

TEST_CASE("estimator unit sizes equal the gpt model's units", "[model][gpt][estimate]") {
  check_same_units(gpt_section(/*n_layer=*/2, /*n_head=*/2, /*n_embd=*/16, /*vocab=*/32, /*block=*/8));
  check_same_units(gpt_section(/*n_layer=*/3, /*n_head=*/4, /*n_embd=*/40, /*vocab=*/257, /*block=*/13));
  check_same_units(gpt_section(/*n_layer=*/1, /*n_head=*/1, /*n_embd=*/7, /*vocab=*/5, /*block=*/3));
}

TEST_CASE("estimator unit sizes equal the mlp model's units", "[model][mlp][estimate]") {
  check_same_units(mlp_section(/*n_layer=*/3, /*n_embd=*/16, /*vocab=*/32));
  check_same_units(mlp_section(/*n_layer=*/1, /*n_embd=*/9, /*vocab=*/300));
}
