// api/host.hpp: the trainer's attachment to an Accelerator and its view of the engine.
#include "api/host.hpp"

#include "engine/backend.hpp"
#include "engine/format/safetensors.hpp"
#include "engine/sharded/unit_block_allocator.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/common/progress.hpp"

namespace accel::api {

Attached attach(const config::LoadedJob& job, comm::Communicator& comm, comm::Rendezvous* rendezvous,
                HostOptions options) {
  auto host = std::make_shared<detail::Host>();
  host->job = &job;
  host->comm = &comm;
  host->rendezvous = rendezvous;
  host->options = std::move(options);
  return {std::make_unique<Accelerator>(host), EngineView(host)};
}

engine::Backend& EngineView::engine() const {
  if (!host_ || !host_->engine) throw RunError("accel: the engine is read before prepare(model, optimizer)");
  return *host_->engine;
}

std::string EngineView::name() const { return engine().name(); }
bool EngineView::start_trace() { return engine().start_trace(); }
void EngineView::write_trace(const std::string& path) { engine().write_trace(path); }

std::vector<std::pair<std::string, const comm::Communicator*>> EngineView::group_communicators() const {
  return engine().group_communicators();
}

nlohmann::json EngineView::memory_report() const { return engine().memory_report(); }

nlohmann::json EngineView::checkpoint_times() const {
  return host_ && host_->checkpoints ? host_->checkpoints->async_times() : nlohmann::json::object();
}

void EngineView::save_full_parameters(const std::string& path) {
  progress::stage("gathering the full weights");
  const engine::NamedTensors params = engine().full_parameters();  // collective; complete on rank 0
  if (host_->comm->rank() != 0) return;
  uint64_t bytes = 0;
  for (const auto& [name, t] : params) bytes += uint64_t(t.numel()) * t.element_size();
  progress::expect_bytes(bytes);
  progress::stage("writing");
  engine::save_safetensors(path, params);
}

int64_t EngineView::unit_block_bytes() { return engine::UnitBlockAllocator::instance().mapped_bytes(); }

}  // namespace accel::api
