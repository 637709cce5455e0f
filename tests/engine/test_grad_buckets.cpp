// plan_buckets: the pure bucket arithmetic of the ddp backend.
#include <catch2/catch.hpp>

#include <set>

#include "engine/replicated/grad_buckets.hpp"

using accel::engine::Bucket;
using accel::engine::BucketParam;
using accel::engine::plan_buckets;

namespace {

// Every parameter exactly once; slots tile each bucket from 0 without gaps.
void check_tiling(const std::vector<Bucket>& buckets, const std::vector<BucketParam>& params) {
  std::set<int> seen;
  for (const auto& b : buckets) {
    int64_t offset = 0;
    for (const auto& s : b.slots) {
      CHECK(s.offset == offset);
      offset += s.numel;
      CHECK(seen.insert(s.index).second);
    }
    CHECK(offset == b.numel);
  }
  CHECK(seen.size() == params.size());
}

}  // namespace

TEST_CASE("buckets fill in ready order up to the cap", "[ddp][buckets]") {
  // 4-byte elements: 100, 150, 50, 300 values; cap 1000 bytes = 250 values.
  std::vector<BucketParam> params = {{7, 100, 4, 0}, {6, 150, 4, 0}, {5, 50, 4, 0}, {4, 300, 4, 0}};
  auto buckets = plan_buckets(params, 1000);
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[0].slots.size() == 2);  // 100 + 150 = 250 values = 1000 bytes: exactly full
  CHECK(buckets[0].slots[0].index == 7);
  CHECK(buckets[1].slots.size() == 1);  // 50, then 300 would pass the cap
  CHECK(buckets[2].slots[0].index == 4);  // larger than the cap: a bucket of its own
  CHECK(buckets[2].numel == 300);
  check_tiling(buckets, params);
}

TEST_CASE("a dtype change starts a new bucket; cap 0 means one bucket per dtype run", "[ddp][buckets]") {
  std::vector<BucketParam> params = {{0, 10, 4, 1}, {1, 10, 4, 1}, {2, 10, 2, 2}, {3, 10, 2, 2}};
  auto buckets = plan_buckets(params, 0);
  REQUIRE(buckets.size() == 2);
  CHECK(buckets[0].dtype == 1);
  CHECK(buckets[1].dtype == 2);
  CHECK(buckets[1].numel == 20);
  check_tiling(buckets, params);
  CHECK(plan_buckets({}, 100).empty());
}
