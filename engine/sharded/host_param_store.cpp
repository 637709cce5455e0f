// Parameter shards in host memory (see host_param_store.hpp).
#include "engine/sharded/host_param_store.hpp"

#include "engine/sharded/unit_block_allocator.hpp"

namespace accel::engine {

int HostParamStore::add_unit(const at::Tensor& shard) {
  shards_.push_back(host_empty(shard.numel(), dtype_, device_).copy_(shard));
  return size() - 1;
}

int64_t HostParamStore::host_bytes() const {
  int64_t b = 0;
  for (const auto& s : shards_) b += s.numel() * int64_t(s.element_size());
  return b;
}

}  // namespace accel::engine
