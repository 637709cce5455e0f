// What accel's own code reaches inside an Accelerator and a user's program does not: the built-in
// trainer's loop on the API (runtime/train/modules) sets the checkpoint record format through it.
// Not part of the public API (include/accel).
#pragma once

#include "accel/accelerator.hpp"
#include "runtime/train/api/state_io.hpp"

namespace accel::detail {

struct AcceleratorInternals {
  // The Accelerator's checkpoint I/O (save_state / load_state), made at first use.
  static api::StateIo& state_io(Accelerator& acc);
};

}  // namespace accel::detail
