// accel::ShardedInit: build a model that never exists whole on one rank (DeepSpeed's zero.Init).
//
//   accel::Accelerator acc;
//   Llama model{nullptr};
//   {
//     accel::ShardedInit sharded(acc);  // each accel::Unit<> below keeps only this rank's slice
//     model = Llama();
//   }
//   accel::PreparedOptimizer& opt = acc.prepare(*model, optimizer);  // no model->to(acc.device())
//
// While the guard lives, every accel::Unit<M> constructed on this thread hands its parameters to the
// Accelerator right after M's constructor: rank 0's values are broadcast one parameter at a time,
// this rank keeps its slice of the unit, and the unit's parameters become placeholders (full shape,
// one element of storage; never write them). So at most one unit is whole at a time, and prepare()
// builds the engine from the slices. Collective: every rank constructs the same units in order.
// Rules: initialize a unit's parameters in its own constructor (values are the user's, drawn on
// every rank and taken from rank 0); each wrapper must become one engine unit (deepspeed
// zero_stage 3, or fsdp FULL_SHARD / HYBRID_SHARD with TRANSFORMER_BASED_WRAP naming the wrapped
// classes), which prepare() checks; parameters outside every wrapper (embeddings, final norms)
// stay whole, as the root every rank keeps. Under strategies that keep parameters whole (ddp,
// zero 0-2, NO_SHARD, SHARD_GRAD_OP) the scope changes nothing.
// On a GPU, leave the model on the host: prepare() moves what is whole to the device and gives the
// placeholders device storage of one element, so the device never holds more than the slices, the
// root and one gathered unit.
#pragma once

namespace accel {

class Accelerator;

class ShardedInit {
 public:
  // Throws std::runtime_error after prepare() (the engine is built) or inside another scope.
  explicit ShardedInit(Accelerator& acc);
  ~ShardedInit();
  ShardedInit(const ShardedInit&) = delete;
  ShardedInit& operator=(const ShardedInit&) = delete;
};

}  // namespace accel
