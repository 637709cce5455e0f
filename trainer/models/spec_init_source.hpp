// The spec's seeded initialization as the engine's unit source (docs/design/0023): each rank draws
// the spec's stream (spec_init_stream.hpp) and keeps the slices its units need, so a built-in model
// of placeholders becomes this rank's shards without ever being whole.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/unit_source.hpp"
#include "trainer/models/builtin_module.hpp"

namespace accel::train {

// `model`: the built-in module (placeholders or not; only names, shapes and dtypes are read).
std::shared_ptr<engine::UnitSource> make_spec_init_source(BuiltinModule& model, int n_layer, uint64_t seed);

}  // namespace accel::train
