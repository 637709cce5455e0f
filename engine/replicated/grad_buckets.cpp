#include "engine/replicated/grad_buckets.hpp"

namespace accel::engine {

std::vector<Bucket> plan_buckets(const std::vector<BucketParam>& ready_order, int64_t cap_bytes) {
  std::vector<Bucket> buckets;
  int64_t bucket_bytes = 0;
  for (const auto& p : ready_order) {
    int64_t bytes = p.numel * p.element_size;
    bool fits = !buckets.empty() && buckets.back().dtype == p.dtype &&
                (cap_bytes <= 0 || bucket_bytes + bytes <= cap_bytes);
    if (!fits) {
      buckets.push_back(Bucket{{}, 0, p.dtype});
      bucket_bytes = 0;
    }
    Bucket& b = buckets.back();
    b.slots.push_back(BucketSlot{p.index, b.numel, p.numel});
    b.numel += p.numel;
    bucket_bytes += bytes;
  }
  return buckets;
}

}  // namespace accel::engine
