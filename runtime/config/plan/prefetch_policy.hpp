// When the sharding engine gathers units ahead of their use (ZeRO-3 / FULL_SHARD), as plain values:
// the DeepSpeed and FSDP dialects each fill one from their own keys (docs/design/0007).
// Torch-free, so the launcher can plan a policy without libtorch headers.
#pragma once

#include <cstdint>

namespace accel::plan {

struct PrefetchPolicy {
  enum class Backward { none, pre, post };
  bool forward = false;                 // at unit u's forward, issue the gathers of the units after it
  Backward backward = Backward::pre;    // pre: at u's pre-backward; post: after u's gradients; none
  int max_prefetch_units = 1;           // how many units ahead a prefetch reaches (FSDP: 1)
  int64_t max_prefetch_numel = 0;       // and at most this many elements ahead (0: no element bound)
  int max_live_units = 0;               // 0: unlimited (FSDP limit_all_gathers: 2)
  int64_t max_live_numel = 0;           // 0: unlimited (DeepSpeed stage3_max_live_parameters)
  friend bool operator==(const PrefetchPolicy&, const PrefetchPolicy&) = default;
};

}  // namespace accel::plan
