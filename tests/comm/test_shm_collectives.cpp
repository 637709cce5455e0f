// ShmCollectives on its own: ranks as threads of one process, each with its own mapping of one
// segment. Closed-form checks over sizes that span several pieces and leave trailing ranks short or
// empty, the descriptor checks that keep a rank off another job's segment, and the failure paths
// (a missing rank named in the timeout, a peer's failure ending a wait at once).
#include "tests/support/catch_with_torch.hpp"

#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/shard_layout.hpp"
#include "runtime/comm/shm_collectives.hpp"
#include "runtime/common/shm_segment_name.hpp"

using accel::comm::shard_range;
using accel::comm::ShmCollectives;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

void add_floats(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<float*>(out);
  const auto* x = static_cast<const float*>(a);
  const auto* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

// Rank r's value at element i: small integers, so every sum is exact in float32.
float contribution(int r, int64_t i) { return static_cast<float>((r + 1) * 10 + i % 7); }
float sum_over_ranks(int world, int64_t i) {
  float s = 0;
  for (int r = 0; r < world; ++r) s += contribution(r, i);
  return s;
}

// One segment for `world` ranks; `body(rank's ShmCollectives)` on a thread per rank. Returns each
// rank's error text ("" when it succeeded).
std::vector<std::string> run_world(int world, std::chrono::milliseconds timeout,
                                   const std::function<void(ShmCollectives&)>& body) {
  auto root = ShmCollectives::create(world, timeout);
  const std::string descriptor = root->descriptor();
  std::vector<std::unique_ptr<ShmCollectives>> ranks;
  ranks.push_back(std::move(root));
  for (int r = 1; r < world; ++r) ranks.push_back(ShmCollectives::attach(descriptor, r, world, timeout));
  ranks[0]->unlink_name();
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(*ranks[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

std::string check_all_collectives(ShmCollectives& c, int64_t count) {
  const int w = c.world(), r = c.rank();
  std::vector<float> full(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) full[i] = contribution(r, i);

  std::vector<float> reduced = full;
  c.all_reduce(reduced.data(), count, sizeof(float), add_floats);
  for (int64_t i = 0; i < count; ++i) {
    if (reduced[i] != sum_over_ranks(w, i)) return "all_reduce: element " + std::to_string(i);
  }

  const auto shard = shard_range(count, w, r);
  std::vector<float> mine(static_cast<size_t>(shard.size()) + 1, -1.0f);  // +1: nothing past the shard
  c.reduce_scatter(full.data(), mine.data(), count, sizeof(float), add_floats);
  for (int64_t i = 0; i < shard.size(); ++i) {
    if (mine[i] != sum_over_ranks(w, shard.begin + i)) return "reduce_scatter: element " + std::to_string(i);
  }
  if (mine.back() != -1.0f) return "reduce_scatter wrote past its shard";

  // In place: the output is the input's own shard (ZeRO's flat gradient buffers).
  std::vector<float> in_place = full;
  c.reduce_scatter(in_place.data(), in_place.data() + shard.begin, count, sizeof(float), add_floats);
  for (int64_t i = 0; i < shard.size(); ++i) {
    if (in_place[shard.begin + i] != sum_over_ranks(w, shard.begin + i)) return "in-place reduce_scatter";
  }

  std::vector<float> gathered(static_cast<size_t>(count), -1.0f);
  for (int64_t i = shard.begin; i < shard.end; ++i) gathered[i] = contribution(r, i) + 0.5f;
  c.all_gather(gathered.data(), count, sizeof(float));
  for (int q = 0; q < w; ++q) {
    const auto s = shard_range(count, w, q);
    for (int64_t i = s.begin; i < s.end; ++i) {
      if (gathered[i] != contribution(q, i) + 0.5f) return "all_gather: element " + std::to_string(i);
    }
  }
  return "";
}

bool name_exists(const std::string& descriptor) {
  const std::string name = descriptor.substr(0, descriptor.find(' '));
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

}  // namespace

TEST_CASE("shm: every collective matches the closed form, across pieces and uneven shards", "[shm]") {
  const int world = GENERATE(2, 3, 4);
  // 1 element (trailing ranks own nothing), 7 (uneven), one piece, and several pieces with a
  // ragged end: a piece holds kSlotBytes / 2 bytes (all_reduce) or that over the world (reduce_scatter).
  const int64_t piece = static_cast<int64_t>(ShmCollectives::kSlotBytes / 2 / sizeof(float));
  const int64_t count = GENERATE_COPY(int64_t{1}, int64_t{7}, int64_t{1000}, 3 * piece + 5);
  CAPTURE(world, count);
  const auto errors = run_world(world, 30s, [&](ShmCollectives& c) {
    // Twice: the halves alternate across collectives, so the second round reuses the first's.
    for (int round = 0; round < 2; ++round) {
      const std::string p = check_all_collectives(c, count);
      if (!p.empty()) throw std::runtime_error("rank " + std::to_string(c.rank()) + ": " + p);
    }
  });
  CHECK(errors == std::vector<std::string>(static_cast<size_t>(world)));
}

TEST_CASE("shm: attach refuses a descriptor that is not the segment's", "[shm]") {
  auto root = ShmCollectives::create(2, 5s);
  const std::string good = root->descriptor();
  const std::string name = good.substr(0, good.find(' '));
  REQUIRE_NOTHROW(ShmCollectives::attach(good, 1, 2, 5s));
  CHECK_THROWS_WITH(ShmCollectives::attach(name + " 12345 2", 1, 2, 5s), Contains("not the one rank 0 described"));
  CHECK_THROWS_WITH(ShmCollectives::attach(good, 1, 3, 5s), Contains("bad shared-memory descriptor"));
  CHECK_THROWS_WITH(ShmCollectives::attach("/accel-shm-no-such-segment 1 2", 1, 2, 5s), Contains("another host"));
  CHECK_THROWS_WITH(ShmCollectives::attach("garbage", 1, 2, 5s), Contains("bad shared-memory descriptor"));
  CHECK_THROWS_WITH(ShmCollectives::create(1, 5s), Contains("at least 2 ranks"));
}

// The cross-user hijack (issue 48) in miniature: a segment under the described name that is not
// private to this user (mode 0666, as an attacker's would be; or another uid's, where the test runs
// as root) is refused before it is mapped, so no gradient piece is ever written where others read.
TEST_CASE("shm: attach refuses a segment that is not this user's and private, before mapping it", "[shm]") {
  auto root = ShmCollectives::create(2, 5s);
  const std::string good = root->descriptor();
  const std::string name = good.substr(0, good.find(' '));
  const std::string prefix = "/" + accel::shm_name::segment_prefix(getppid());
  CHECK(name.rfind(prefix, 0) == 0);  // the launcher sweeps these
  CHECK(name.size() == prefix.size() + 32);  // then 128 random bits, as hex
  const int fd = shm_open(name.c_str(), O_RDWR | O_NOFOLLOW, 0);
  REQUIRE(fd >= 0);
  REQUIRE(fchmod(fd, 0666) == 0);
  CHECK_THROWS_WITH(ShmCollectives::attach(good, 1, 2, 5s), Contains("is refused: its mode is 0666, not 0600"));
  REQUIRE(fchmod(fd, 0600) == 0);
  if (geteuid() == 0) {
    REQUIRE(fchown(fd, 65534, 65534) == 0);
    CHECK_THROWS_WITH(ShmCollectives::attach(good, 1, 2, 5s), Contains("belongs to uid 65534"));
    REQUIRE(fchown(fd, 0, 0) == 0);
  }
  close(fd);
  REQUIRE_NOTHROW(ShmCollectives::attach(good, 1, 2, 5s));
  CHECK_THROWS_WITH(ShmCollectives::attach("/dev/shm/x 1 2", 1, 2, 5s), Contains("not a segment name accel creates"));
}

TEST_CASE("shm: the name leaves /dev/shm once unlinked, and the mappings keep working", "[shm]") {
  std::string descriptor;
  const auto errors = run_world(2, 30s, [&](ShmCollectives& c) {
    if (c.rank() == 0) descriptor = c.descriptor();
    float x = static_cast<float>(c.rank() + 1);
    c.all_reduce(&x, 1, sizeof(float), add_floats);
    if (x != 3.0f) throw std::runtime_error("all_reduce after unlink gave " + std::to_string(x));
  });
  CHECK(errors == std::vector<std::string>(2));
  CHECK_FALSE(descriptor.empty());
  CHECK_FALSE(name_exists(descriptor));
}

TEST_CASE("shm: a missing rank is named in the timeout, and the others stop at once", "[shm][timeout]") {
  // Rank 2 never arrives. Whichever of ranks 0 and 1 times out first names rank 2 and marks the
  // segment failed; the other then stops without waiting out its own timeout.
  const auto start = std::chrono::steady_clock::now();
  const auto errors = run_world(3, 1000ms, [](ShmCollectives& c) {
    if (c.rank() == 2) return;
    float x = 1;
    c.all_reduce(&x, 1, sizeof(float), add_floats);
  });
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(errors[2].empty());
  // Both name rank 2: the one that timed out, and the one it stopped (quoting the first one's reason).
  int timed_out = 0, stopped = 0;
  for (int r = 0; r < 2; ++r) {
    CAPTURE(errors[r]);
    CHECK_THAT(errors[r], Contains("timed out after 1000 ms waiting for rank(s) 2"));
    if (errors[r].find("failed while this rank waited: rank ") != std::string::npos) {
      ++stopped;
    } else {
      ++timed_out;
    }
  }
  CHECK(timed_out >= 1);
  CHECK(took < 10s);  // bounded by one timeout, not a hang (a generous bound, not a timing goal)
}

TEST_CASE("shm: after mark_failed every later collective throws", "[shm]") {
  auto root = ShmCollectives::create(2, 5s);
  auto peer = ShmCollectives::attach(root->descriptor(), 1, 2, 5s);
  root->unlink_name();
  peer->mark_failed("rank 1: its loss was NaN");
  root->mark_failed("rank 0: a later failure");  // the first reason stays
  float x = 1;
  CHECK_THROWS_WITH(root->all_reduce(&x, 1, sizeof(float), add_floats),
                    Contains("an earlier collective failed: rank 1: its loss was NaN"));
  CHECK_THROWS_WITH(peer->all_gather(&x, 2, sizeof(float)), Contains("rank 1: its loss was NaN"));
}

TEST_CASE("shm: ranks in different ops or sizes fail at once, naming both", "[shm]") {
  // Without the check these meet at the same barriers and go on with each other's bytes: the sizes
  // below take one piece each, and all_reduce and all_gather both start with a barrier.
  const auto start = std::chrono::steady_clock::now();
  const auto sizes = run_world(3, 30s, [](ShmCollectives& c) {
    std::vector<float> x(8, 1.0f);
    c.all_reduce(x.data(), c.rank() == 1 ? 4 : 8, sizeof(float), add_floats);
  });
  const auto ops = run_world(2, 30s, [](ShmCollectives& c) {
    std::vector<float> x(8, 1.0f);
    if (c.rank() == 0) c.all_reduce(x.data(), 8, sizeof(float), add_floats);
    else c.all_gather(x.data(), 8, sizeof(float));
  });
  const auto took = std::chrono::steady_clock::now() - start;
  for (const auto& e : sizes) {
    CAPTURE(e);
    CHECK_THAT(e, Contains("all_reduce of 4 elements of 4 bytes"));
    CHECK_THAT(e, Contains("all_reduce of 8 elements of 4 bytes"));
  }
  for (const auto& e : ops) {
    CAPTURE(e);
    CHECK_THAT(e, Contains("all_reduce of 8 elements of 4 bytes"));
    CHECK_THAT(e, Contains("all_gather of 8 elements of 4 bytes"));
  }
  CHECK(took < 10s);  // at once, not after the 30 s timeout (a generous bound for a loaded machine)
}
