// Where the sharding engine takes a unit's starting values from when the model's parameters have
// none (docs/design/0023): a model built with placeholders (placeholder.hpp) is filled unit by unit
// from a source, each rank writing only the values it keeps (its shard of a unit released after
// building, the whole of a unit it keeps), so the model never exists whole on one rank.
// Without a source the engine copies the parameters' values and broadcasts rank 0's.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace accel::engine {

class UnitSource {
 public:
  virtual ~UnitSource() = default;
  // Writes elements [begin, begin + dest.numel()) of parameter `name` (flattened, row-major; `param`
  // is the model's parameter, for its shape and dtype) into `dest` (contiguous; the engine's flat
  // buffer, in its dtype). Called in unit order, parameters in order within a unit.
  virtual void fill(const std::string& name, const at::Tensor& param, int64_t begin, at::Tensor dest) = 0;
  // What the start-up log says the values came from ("the spec initializer, seed 1234").
  virtual std::string describe() const = 0;
};

}  // namespace accel::engine
