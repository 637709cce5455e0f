// api/host.hpp: the trainer's attachment to an Accelerator and its view of the engine.
#include "api/host.hpp"

#include <map>

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

void EngineView::export_weights(const std::string& path, const engine::NamedTensors& params,
                                const config::ModelSection* model, const engine::ExportOptions& options) {
  progress::stage("gathering and writing the weights, one unit at a time");
  std::unique_ptr<engine::WeightsExport> out;
  if (host_->comm->rank() == 0) {
    // In the engine's order: the file is then byte-equal to `accel merge-weights` of a checkpoint.
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& [name, p] : params) shapes[name] = p.sizes().vec();
    std::vector<engine::TensorSpec> specs;
    uint64_t bytes = 0;
    for (const std::string& name : engine().parameter_order()) {
      const auto it = shapes.find(name);
      if (it == shapes.end()) throw RunError("weights export: the engine's parameter '" + name + "' is not the model's");
      specs.push_back({name, at::kFloat, it->second});
      int64_t numel = 1;
      for (int64_t d : it->second) numel *= d;
      bytes += uint64_t(numel) * c10::elementSize(engine::export_scalar_type(options.dtype));
    }
    progress::expect_bytes(bytes);
    out = std::make_unique<engine::WeightsExport>(path, specs, model, options);
  }
  engine().visit_full_parameters([&](const engine::NamedTensors& unit) {  // collective; rank 0 is called
    for (const auto& [name, value] : unit) out->write(name, value);
  });
  if (out) out->commit();
}

int64_t EngineView::unit_block_bytes() { return engine::UnitBlockAllocator::instance().mapped_bytes(); }

}  // namespace accel::api
