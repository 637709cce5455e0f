// Gradient buckets for the replicated (ddp) backend: which parameters share one flat all-reduce.
// Pure arithmetic, no tensors, so it is unit-tested on its own.
// Parameters are listed in the order their gradients become ready in backward (the reverse of the
// forward order, as PyTorch DDP assumes). A bucket takes consecutive parameters of one dtype until
// adding the next would pass cap_bytes; a parameter larger than the cap gets a bucket of its own.
// Invariants: every parameter is in exactly one bucket, at offsets [offset, offset + numel) that
// tile the bucket without gaps or overlap; bucket order is ready order, so every rank issues the
// all-reduces in the same order.
#pragma once

#include <cstdint>
#include <vector>

namespace accel::engine {

struct BucketParam {
  int index = 0;          // the caller's parameter index
  int64_t numel = 0;
  int element_size = 4;   // bytes
  int dtype = 0;          // any id; parameters of different dtypes never share a bucket
};

struct BucketSlot {
  int index = 0;
  int64_t offset = 0;     // elements into the bucket's flat buffer
  int64_t numel = 0;
};

struct Bucket {
  std::vector<BucketSlot> slots;
  int64_t numel = 0;
  int dtype = 0;
};

// cap_bytes <= 0 puts everything of one dtype in a single bucket.
std::vector<Bucket> plan_buckets(const std::vector<BucketParam>& ready_order, int64_t cap_bytes);

}  // namespace accel::engine
