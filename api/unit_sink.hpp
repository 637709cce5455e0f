// The library side of accel::Unit<M> (include/accel/unit.hpp; docs/design/0015, design B): the sink
// a prepared model's wrappers send their boundaries to, and how prepare() finds and hooks them.
// A wrapper with no sink (outside a prepared model; ddp and zero stages 0-2, which keep parameters
// gathered) is a plain call. A sink outlives its Accelerator (the wrappers share it): detach()
// turns it into a pass-through when the Accelerator goes.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "accel/unit.hpp"
#include "engine/unit_hooks.hpp"

namespace accel::detail {

class UnitSink {
 public:
  // `hooks`: the engine's hooks for the forward now running (it may begin the micro-step).
  // `recompute`: fsdp.activation_checkpointing, each wrapper recomputes its forward in backward.
  UnitSink(std::function<engine::UnitHooks*()> hooks, std::string strategy, bool recompute)
      : hooks_(std::move(hooks)), strategy_(std::move(strategy)), recompute_(recompute) {}
  bool recomputes() const { return recompute_ && hooks_ != nullptr; }
  engine::UnitHooks* hooks() { return hooks_ ? hooks_() : nullptr; }
  void detach() { hooks_ = nullptr; }
  // The wrapper's path in the prepared model ("h.3"), for messages.
  std::string path_of(const torch::nn::Module& unit) const;
  const std::string& strategy() const { return strategy_; }
  std::unordered_map<const torch::nn::Module*, std::string>& paths() { return paths_; }
  // Activation checkpointing where gradients are found ready per backward pass (the parameters stay
  // gathered: NO_SHARD, SHARD_GRAD_OP): each recompute is a pass of its own, so a wrapper called
  // twice in one micro-step would have its gradients reduced after its first recompute. Its
  // second call is refused (count_use throws); begin_micro_step starts the count again.
  void refuse_second_use(bool on) { single_use_ = on; }
  bool refuses_second_use() const { return single_use_ && recomputes(); }
  void begin_micro_step() { uses_.clear(); }
  void count_use(const torch::nn::Module& unit);

 private:
  std::function<engine::UnitHooks*()> hooks_;
  std::string strategy_;
  bool recompute_ = false;
  std::unordered_map<const torch::nn::Module*, std::string> paths_;
  bool single_use_ = false;
  std::unordered_map<const torch::nn::Module*, int> uses_;
};

struct UnitAccess {
  static void attach(UnitTag& tag, std::shared_ptr<UnitSink> sink) { tag.sink_ = std::move(sink); }
  static UnitSink* sink(UnitTag& tag) { return tag.sink_.get(); }
};

}  // namespace accel::detail

namespace accel::api {

// The accel::Unit<> wrapper behind `module`, or nullptr for any other module.
detail::UnitTag* unit_tag(torch::nn::Module& module);
// Whether a module below `root` (or root itself) is an accel::Unit<> wrapper.
bool has_unit_wrappers(torch::nn::Module& root);

// Points every wrapper in `units` (module path -> the engine unit's module) at one new sink, so
// their calls reach the engine's hooks (and recompute in backward when `recompute`); returns the
// sink (detach it when the engine goes).
std::shared_ptr<detail::UnitSink> attach_unit_sink(const std::vector<std::pair<std::string, torch::nn::Module*>>& units,
                                                   std::function<engine::UnitHooks*()> hooks, std::string strategy,
                                                   bool recompute = false);

}  // namespace accel::api
