// What accel::ShardedInit keeps of each accel::Unit<> built in its scope (docs/design/0023,
// decision 3): right after the unit's constructor, rank 0's values of its parameters are broadcast
// one parameter at a time, this rank's slice of the unit's flat layout is kept, and the parameters
// become placeholders (engine/placeholder.hpp). prepare() then fills the engine from the stash (a
// UnitSource) and checks that the engine asked for exactly the slices kept: the slices assume each
// wrapper is one engine unit, which only the engine's grouping can confirm.
// Invariant: at most one unit is whole at a time, while it is constructed; afterwards a rank holds
// its slices only (and the units the plan keeps whole, which stay as built).
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "engine/unit_source.hpp"
#include "runtime/comm/communicator.hpp"

namespace accel::api {

// What the scope knows of the engine before prepare(): the plan's partitioning.
struct StashLayout {
  bool partitions = false;            // parameters are freed between uses (stage 3, FULL_SHARD, HYBRID_SHARD)
  int shards = 1;                     // the ranks a unit is cut across (its shard group)
  int shard_rank = 0;                 // this rank's place among them
  int64_t persistence_threshold = 0;  // units with fewer values stay whole (zero 3)
};

class ConstructionStash final : public engine::UnitSource {
 public:
  ConstructionStash(comm::Communicator& comm, StashLayout layout) : comm_(comm), layout_(layout) {}

  // `unit` (an accel::Unit<>'s module) has just been constructed on this thread. Collective: every
  // rank constructs the same units in the same order, as the broadcast of rank 0's values needs.
  void take(torch::nn::Module& unit);

  // Whether `param` was cut to a slice (so has no values of its own).
  bool holds(const at::Tensor& param) const { return pieces_.count(param.unsafeGetTensorImpl()) > 0; }

  // The engine's source: a stashed parameter from its slice (released once copied), any other from
  // its own values. Throws RunError when the engine asks for another range than the one kept.
  void fill(const std::string& name, const at::Tensor& param, int64_t begin, at::Tensor dest) override;
  std::string describe() const override;

  // After the engine is built: every kept slice was asked for. Throws RunError (with the fix) if not.
  void check_consumed() const;

  int units_cut() const { return units_cut_; }
  int64_t bytes_held() const { return bytes_held_; }

 private:
  struct Piece {
    std::string unit;      // the class and construction index, e.g. "BlockImpl #3"
    int64_t begin = 0;     // the slice's first element within the parameter (flattened)
    int64_t numel = 0;     // its length (0: none of this parameter falls in this rank's shard)
    at::Tensor values;     // the slice, until the engine has copied it
    bool used = false;
  };

  comm::Communicator& comm_;
  StashLayout layout_;
  std::unordered_map<const void*, Piece> pieces_;  // by the parameter's TensorImpl
  std::unordered_set<const void*> claimed_;        // the parameters of every wrapper built so far
  int units_seen_ = 0, units_cut_ = 0;
  int64_t bytes_held_ = 0;
};

// A model left on the host of a GPU job (accel::ShardedInit): what is whole goes to `device` one
// tensor at a time; a placeholder gets one element of device storage, never its full shape.
void place_on_device(torch::nn::Module& model, const at::Device& device);

}  // namespace accel::api
