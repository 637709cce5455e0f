// What accel's own code reaches inside an Accelerator and a user's program does not: the built-in
// trainer runs on the API through it (docs/design/0017), with its own communicator in front, its
// checkpoint record format, and the engine's trace, counters and memory report.
// Not part of the public API (include/accel).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "accel/accelerator.hpp"
#include "api/state_io.hpp"
#include "engine/backend.hpp"
#include "engine/unit_source.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/comm/rendezvous.hpp"
#include "runtime/config/job_loader.hpp"

namespace accel::detail {

struct AcceleratorInternals {
  // An Accelerator over a world the caller has joined already: `comm` (which may be a wrapper in
  // front of the world's communicator, like the trainer's fault injector) and `rendezvous` (null:
  // no store, e.g. a world of one) must outlive it.
  static std::unique_ptr<Accelerator> attach(const config::LoadedJob& job, comm::Communicator& comm,
                                             comm::Rendezvous* rendezvous);
  // The Accelerator's checkpoint I/O (save_state / load_state), made at first use.
  static api::StateIo& state_io(Accelerator& acc);
  // The engine prepare() built (RunError before prepare).
  static backends::Backend& engine(Accelerator& acc);
  // Where prepare()'s engine takes the units' values from (the trainer's sharded initialization,
  // docs/design/0023): the prepared model's parameters may then be placeholders. Before prepare().
  static void set_unit_source(Accelerator& acc, std::shared_ptr<backends::UnitSource> source);
};

}  // namespace accel::detail
