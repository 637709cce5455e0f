// A built-in model (make_builtin_module: GptModule, MlpModule) on an engine, prepared as the
// built-in trainer's Accelerator::prepare does it: the units of the job's unit policy
// (api::prepared_units: "root" pinned, then the accel::Unit<> layers h.{i} or layer.{i}), the
// built-in parameter groups, the fsdp plan of the built-in model (its refusal thrown as a RunError,
// its activation checkpointing on the wrappers), and a UnitSink on the wrappers. For engine tests
// that drive begin_micro_step / end_micro_step themselves: forward() takes the hooks the engine
// returned and hands them to the wrappers for that call.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/backend.hpp"
#include "engine/unit_spec.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/config/job.hpp"
#include "trainer/models/builtin_module.hpp"

namespace accel::detail {
class UnitSink;
}

namespace accel::test {

// The built-in model `section` names, initialised from `seed`.
std::shared_ptr<train::BuiltinModule> builtin_module(const config::ModelSection& section, uint64_t seed);

class PreparedBuiltin {
 public:
  // Builds the engine over the units (a test's own: a ShardedEngine with its policy, a DdpBackend).
  using EngineFactory = std::function<std::unique_ptr<engine::Backend>(std::vector<engine::UnitSpec>)>;

  struct UnitInfo {
    std::string name;    // "root", "h.0", "layer.2"
    int64_t numel = 0;
    bool pinned = false;  // no boundary: never released
  };

  // The job's engine (engine::make_backend) with the job's optimizer section.
  PreparedBuiltin(const config::JobConfig& job, comm::Communicator& comm, std::shared_ptr<train::BuiltinModule> module);
  PreparedBuiltin(const config::JobConfig& job, std::shared_ptr<train::BuiltinModule> module,
                  const EngineFactory& make_engine);
  ~PreparedBuiltin();  // the wrappers become plain calls again
  PreparedBuiltin(const PreparedBuiltin&) = delete;
  PreparedBuiltin& operator=(const PreparedBuiltin&) = delete;

  engine::Backend& engine() { return *engine_; }
  train::BuiltinModule& module() { return *module_; }

  // Logits of idx [B, T]; the wrappers' boundaries call `hooks` (nullptr: none) during this call.
  // Waits first for the parameters the forward reads outside any boundary (the root's). Each call
  // is one micro-step's forward (the sink's count of a wrapper's uses starts again).
  at::Tensor forward(const at::Tensor& idx, engine::UnitHooks* hooks);
  // Mean token cross-entropy in fp32 (token_cross_entropy).
  static at::Tensor loss(const at::Tensor& logits, const at::Tensor& targets);

  // (spec name, parameter) in spec order: the tensors themselves.
  engine::NamedTensors parameters() const { return module_->spec_parameters(); }
  // The engine's units, in the order they were given to it.
  const std::vector<UnitInfo>& units() const { return units_; }
  // The unit a wrapper is ("h.1"); throws std::out_of_range for another module.
  const std::string& unit_name(const torch::nn::Module& wrapper) const { return names_.at(&wrapper); }
  // Whether the wrappers recompute their forward in backward (fsdp.activation_checkpointing).
  bool recomputes() const { return recompute_; }

 private:
  void prepare(const config::JobConfig& job, const EngineFactory& make_engine);

  std::shared_ptr<train::BuiltinModule> module_;
  std::unique_ptr<engine::Backend> engine_;
  std::shared_ptr<detail::UnitSink> sink_;
  engine::UnitHooks* hooks_ = nullptr;
  std::vector<UnitInfo> units_;
  std::unordered_map<const torch::nn::Module*, std::string> names_;
  bool recompute_ = false;
};

}  // namespace accel::test
