// accel's own trainer on the public API (docs/design/0017; 0022, "no friend backdoor"): an
// Accelerator over a world the trainer has joined already, with the trainer's checkpoint record
// format and unit source, and a view of the engine prepare() builds with exactly what the trainer
// reads from it. The Accelerator takes a detail::Host (opaque in include/accel) and reads its
// options from it and writes its engine into it; nothing else of the Accelerator is reachable.
// Not installed: programs use include/accel only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/accelerator.hpp"
#include "api/state_io.hpp"
#include "engine/format/weights_export.hpp"
#include "engine/named_tensors.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/comm/rendezvous.hpp"
#include "runtime/config/job_loader.hpp"

namespace accel::engine {
class Backend;
class UnitSource;
}  // namespace accel::engine

namespace accel::api {

struct HostOptions {
  // The trainer's state record (trainer_record.hpp) in place of a user program's.
  std::optional<RecordFormat> record_format;
  // Where prepare()'s engine takes the units' values from (the trainer's sharded initialization,
  // docs/design/0023): the prepared model's parameters may then be placeholders. Null: from them.
  std::shared_ptr<engine::UnitSource> unit_source;
};

}  // namespace accel::api

namespace accel::detail {

// What an Accelerator made by api::attach shares with its host: the world and the options in, the
// engine out. `job`, `comm` and `rendezvous` (null: no store) must outlive the Accelerator.
struct Host {
  const config::LoadedJob* job = nullptr;
  comm::Communicator* comm = nullptr;
  comm::Rendezvous* rendezvous = nullptr;
  api::HostOptions options;
  engine::Backend* engine = nullptr;  // set by prepare(), cleared when the Accelerator goes
  api::StateIo* checkpoints = nullptr;  // set at the first save or load, cleared likewise
};

}  // namespace accel::detail

namespace accel::api {

// The engine of an attached Accelerator, as the trainer reads it. Every call but unit_block_bytes
// needs prepare() to have run (RunError otherwise) and the Accelerator to be alive.
class EngineView {
 public:
  EngineView() = default;
  explicit EngineView(std::shared_ptr<detail::Host> host) : host_(std::move(host)) {}

  std::string name() const;
  // `accel launch --trace`: start recording the per-unit schedule (false: the engine has none),
  // and write it as a Chrome trace at the end (every rank).
  bool start_trace();
  void write_trace(const std::string& path);
  // Communicators the engine split from the world (HYBRID_SHARD's groups), by name.
  std::vector<std::pair<std::string, const comm::Communicator*>> group_communicators() const;
  // This rank's model-state bytes as the engine holds them (backend.hpp's memory_report).
  nlohmann::json memory_report() const;
  // Where asynchronous checkpoints spent time (StateIo::async_times); {} before any save or load.
  nlohmann::json checkpoint_times() const;
  // Collective: the full parameters written by rank 0 to `path` as `options` say (accel's
  // safetensors file in `params`' order, or a Hugging Face folder for `model`), streamed one unit
  // gathered, written and freed at a time (engine/format/weights_export.hpp). `params`: the
  // model's spec names and shapes (placeholders will do).
  void export_weights(const std::string& path, const engine::NamedTensors& params, const config::ModelSection* model,
                      const engine::ExportOptions& options);
  // The sharding engine's unit buffers mapped in this process, live and kept (outside malloc).
  static int64_t unit_block_bytes();

 private:
  engine::Backend& engine() const;
  std::shared_ptr<detail::Host> host_;
};

struct Attached {
  std::unique_ptr<Accelerator> accelerator;
  EngineView engine;
};

// An Accelerator over a world the caller has joined already: `comm` (which may be a wrapper in
// front of the world's communicator, like the trainer's fault injector), `rendezvous` (null: no
// store, e.g. a world of one) and `job` must outlive it.
Attached attach(const config::LoadedJob& job, comm::Communicator& comm, comm::Rendezvous* rendezvous,
                HostOptions options);

}  // namespace accel::api
