// accel's built-in model in its train::Model form (the reference layers, with unit hooks in their
// forward) on the engines, for engine tests that drive begin_micro_step / end_micro_step
// themselves. The trainer prepares the module form through the public API instead
// (runtime/train/modules); both reach the one make_backend over UnitSpecs.
#pragma once

#include <memory>
#include <vector>

#include "backends/backend.hpp"
#include "backends/core/unit_spec.hpp"
#include "runtime/train/model/model.hpp"

namespace accel::test {

// The model's units: one per model unit, in forward order, under the spec names; the embedding
// (unit 0, used again as the tied head) pinned; parameter groups by the spec's weight-decay rule
// (train::builtin_param_group). Every parameter exactly once (RunError otherwise).
std::vector<backends::UnitSpec> model_unit_specs(train::Model& model);

// The job's backend over the model with the job's optimizer section. fsdp: the built-in model's
// plan first (a class name other than its layer class is refused, as the launcher refuses it),
// and activation checkpointing set on the model's layer units.
std::unique_ptr<backends::Backend> make_model_backend(const config::JobConfig& job, comm::Communicator& comm,
                                                      train::Model& model);

}  // namespace accel::test
