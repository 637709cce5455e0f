// The shuffled order: a seeded permutation of the training windows per epoch (same seed, same order;
// another seed or epoch, another order), independent of how W*B*G is split, and never a held-out window.
#include "tests/support/catch_with_torch.hpp"

#include <algorithm>
#include <array>
#include <numeric>

#include "tests/train/data/data_test_support.hpp"
#include "trainer/data/sample_order.hpp"

using namespace accel;
using namespace accel::train;

namespace {

constexpr auto kShuffled = config::DataOrder::shuffled;

// The training windows of global samples [first, first + count) (one row per step: W = B = G = 1).
std::vector<int64_t> sample_windows(const Dataset& ds, int64_t first, int64_t count) {
  std::vector<int64_t> ks;
  for (int64_t i = first; i < first + count; ++i) ks.push_back(ds.train_window(i, 0, 0, 1, 1, 1, 0));
  return ks;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

}  // namespace

TEST_CASE("epoch_permutation: a seeded Fisher-Yates permutation", "[data][order]") {
  const auto p = epoch_permutation(42, 0, 1000);
  auto sorted = p;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == iota(1000));
  CHECK(p != iota(1000));
  CHECK(epoch_permutation(42, 0, 1000) == p);
  CHECK(epoch_permutation(43, 0, 1000) != p);
  CHECK(epoch_permutation(42, 1, 1000) != p);
  CHECK(epoch_permutation(42, 0, 1) == std::vector<int64_t>{0});
  CHECK(epoch_permutation(42, 0, 0).empty());
  // Pinned: the definition is part of the data format (tests/train/data/reference_data.py).
  CHECK(std::vector<int64_t>(p.begin(), p.begin() + 5) == std::vector<int64_t>{845, 48, 820, 884, 95});
}

TEST_CASE("shuffled: every epoch visits each training window once, in a seeded order", "[data][order]") {
  const Dataset ds = test::counting_dataset(2001, 16, 0.1, kShuffled, 7);  // n_train 112
  const int64_t n = ds.num_train_windows();
  REQUIRE(n == 112);
  std::vector<std::vector<int64_t>> epochs;
  for (int64_t e = 0; e < 3; ++e) {
    auto ks = sample_windows(ds, e * n, n);
    CHECK(ks == epoch_permutation(7, e, n));  // window = perm_e[i mod n_train], e = i / n_train
    auto sorted = ks;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == iota(n));  // a permutation of exactly the training windows
    epochs.push_back(ks);
  }
  CHECK(epochs[0] != epochs[1]);
  CHECK(epochs[1] != epochs[2]);
  CHECK(epochs[0] != iota(n));

  const Dataset same = test::counting_dataset(2001, 16, 0.1, kShuffled, 7);
  const Dataset other = test::counting_dataset(2001, 16, 0.1, kShuffled, 8);
  CHECK(sample_windows(same, 0, 2 * n) == sample_windows(ds, 0, 2 * n));
  CHECK(sample_windows(other, 0, n) != epochs[0]);
  // Random access agrees with a sweep (the permutation cache holds two epochs).
  CHECK(ds.train_window(5 * n + 3, 0, 0, 1, 1, 1, 0) == epoch_permutation(7, 5, n)[3]);
  CHECK(ds.train_window(2 * n - 1, 0, 0, 1, 1, 1, 0) == epochs[1][n - 1]);
  CHECK(ds.train_window(0, 0, 0, 1, 1, 1, 0) == epochs[0][0]);
  // The rows hold the windows' tokens.
  CHECK(test::windows_of(ds.train_batch(0, 0, 0, 1, 4, 1)) ==
        std::vector<int64_t>(epochs[0].begin(), epochs[0].begin() + 4));
}

TEST_CASE("shuffled: the global batch does not depend on how W*B*G is split", "[data][order]") {
  const Dataset ds = test::counting_dataset(2001, 16, 0.1, kShuffled, 1337);
  const std::vector<std::array<int, 3>> splits = {{1, 8, 1}, {2, 4, 1}, {4, 2, 1}, {2, 2, 2}, {1, 2, 4}};
  for (int64_t step : {0, 13, 14, 27, 500}) {  // step 13 ends epoch 0 exactly; 27 straddles epochs 1 and 2
    std::vector<int64_t> ref;
    for (int b = 0; b < 8; ++b) ref.push_back(ds.train_window(step, 0, 0, 1, 8, 1, b));
    for (const auto& [W, B, G] : splits) {
      INFO("step " << step << " W " << W << " B " << B << " G " << G);
      std::vector<int64_t> got;
      for (int m = 0; m < G; ++m)
        for (int r = 0; r < W; ++r) {
          const auto ks = test::windows_of(ds.train_batch(step, m, r, W, B, G));
          got.insert(got.end(), ks.begin(), ks.end());
        }
      CHECK(got == ref);
    }
  }
}

TEST_CASE("shuffled: held-out windows never train", "[data][order]") {
  const Dataset ds = test::counting_dataset(2001, 16, 0.25, kShuffled, 3);  // 125 windows: 93 train
  REQUIRE(ds.num_train_windows() == 93);
  for (int64_t step = 0; step < 50; ++step)  // 50*8 = 400 samples: more than 4 epochs
    for (int64_t k : test::windows_of(ds.train_batch(step, 0, 0, 1, 8, 1))) {
      REQUIRE(k >= 0);
      REQUIRE(k < 93);
    }
}

ACCEL_ASSERT_CHECK_IS_CATCH();
