// Windows, the validation split and the sequential order (spec/training.md, section Data): the formula
// against hand-computed rows, wrap-around modulo n_train, the global batch's independence of how W*B*G
// is split, and the held-out windows (never trained on, swept exactly once by val_batch).
#include "tests/support/catch_with_torch.hpp"

#include <array>
#include <numeric>

#include "tests/train/data/data_test_support.hpp"
#include "trainer/data/data_error.hpp"

using namespace accel;
using namespace accel::train;
using Catch::Matchers::Contains;

TEST_CASE("windows: count of whole windows and the validation split", "[data][windows]") {
  CHECK(num_whole_windows(101, 4) == 25);  // window 24 = tokens [96, 101): the last fits exactly
  CHECK(num_whole_windows(100, 4) == 24);  // window 24 would need token 100
  CHECK(num_whole_windows(5, 4) == 1);
  CHECK(num_whole_windows(4, 4) == 0);
  CHECK(num_whole_windows(0, 4) == 0);

  auto split = split_windows(101, 4, 0.2);
  CHECK(split.num_windows == 25);
  CHECK(split.num_val == 5);
  CHECK(split.num_train == 20);
  CHECK(split_windows(101, 4, 0.0).num_val == 0);
  CHECK(split_windows(101, 4, 0.01).num_val == 1);    // ceil(0.25)
  CHECK(split_windows(101, 4, 0.0001).num_val == 1);  // at least one window when evaluation is on
  CHECK(split_windows(41, 4, 0.3).num_val == 3);
  CHECK(split_windows(401, 4, 0.07).num_val == 8);    // 0.07 * 100 is 7.000000000000001 in double, as in Python
  CHECK(split_windows(41, 4, 0.7).num_val == 7);
  CHECK(split_windows(45, 4, 0.3).num_val == 4);      // ceil(3.3)

  CHECK_THROWS_WITH(test::counting_dataset(4, 4), Contains("counting.bin") && Contains("not one whole window"));
  CHECK_THROWS_WITH(test::counting_dataset(5, 4, 0.5), Contains("holds out all of them"));
}

TEST_CASE("sequential: rows follow k = ((s*G + m)*W + r)*B + b mod n_train (hand-computed)", "[data][windows]") {
  // 101 tokens, T 4: 25 windows, val_fraction 0.2 holds out 5, so n_train 20.
  const Dataset ds = test::counting_dataset(101, 4, 0.2);
  REQUIRE(ds.num_train_windows() == 20);
  REQUIRE(ds.num_val_windows() == 5);

  // W 2, B 3, G 2. Step 1, micro-step 1, rank 1, row 2: ((1*2 + 1)*2 + 1)*3 + 2 = 23 -> 23 mod 20 = 3.
  CHECK(ds.train_window(1, 1, 1, 2, 3, 2, 2) == 3);
  const Batch b = ds.train_batch(1, 1, 1, 2, 3, 2);
  REQUIRE(b.x.sizes() == at::IntArrayRef({3, 4}));
  REQUIRE(b.x.scalar_type() == at::kLong);
  REQUIRE(b.y.scalar_type() == at::kLong);
  auto row = [](std::vector<int64_t> v) { return at::tensor(v, at::kLong); };
  CHECK(b.x[2].equal(row({12, 13, 14, 15})));  // window 3: tokens [12, 17)
  CHECK(b.y[2].equal(row({13, 14, 15, 16})));
  CHECK(test::windows_of(b) == std::vector<int64_t>{1, 2, 3});  // samples 21, 22, 23 wrap to 1, 2, 3

  // Step 0, micro-step 0, rank 1: samples 3, 4, 5.
  CHECK(test::windows_of(ds.train_batch(0, 0, 1, 2, 3, 2)) == std::vector<int64_t>{3, 4, 5});
  // Step 0, micro-step 1, rank 0: samples 6, 7, 8.
  CHECK(test::windows_of(ds.train_batch(0, 1, 0, 2, 3, 2)) == std::vector<int64_t>{6, 7, 8});
}

TEST_CASE("sequential: sample indices wrap around modulo n_train", "[data][windows]") {
  const Dataset ds = test::counting_dataset(101, 4, 0.2);  // n_train 20
  // B 8, W 1, G 1: step 2 = samples 16..23 -> 16, 17, 18, 19, 0, 1, 2, 3.
  CHECK(test::windows_of(ds.train_batch(2, 0, 0, 1, 8, 1)) == std::vector<int64_t>{16, 17, 18, 19, 0, 1, 2, 3});
  // Far out: step 1000 = samples 8000..8007, 8000 mod 20 = 0.
  CHECK(test::windows_of(ds.train_batch(1000, 0, 0, 1, 8, 1)) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  // Without a validation split every window trains, the last one included.
  const Dataset all = test::counting_dataset(101, 4);
  CHECK(all.num_train_windows() == 25);
  CHECK(test::windows_of(all.train_batch(3, 0, 0, 1, 8, 1)) == std::vector<int64_t>{24, 0, 1, 2, 3, 4, 5, 6});
}

TEST_CASE("train_batch: bad arguments are errors", "[data][windows]") {
  const Dataset ds = test::counting_dataset(101, 4);
  CHECK_THROWS_WITH(ds.train_batch(0, 2, 0, 1, 8, 2), Contains("micro_step 2"));
  CHECK_THROWS_WITH(ds.train_batch(0, 0, 2, 2, 8, 1), Contains("rank 2"));
  CHECK_THROWS_WITH(ds.train_batch(-1, 0, 0, 1, 8, 1), Contains("step -1"));
  CHECK_THROWS_AS(ds.train_batch(0, 0, 0, 1, 0, 1), DataError);
  CHECK_THROWS_AS(ds.windows({25}), DataError);
}

// The global batch of step s: every rank's micro batches concatenated in (micro-step, rank, row) order.
at::Tensor global_batch(const Dataset& ds, int64_t step, int W, int B, int G, bool targets = false) {
  std::vector<at::Tensor> parts;
  for (int m = 0; m < G; ++m)
    for (int r = 0; r < W; ++r) {
      const Batch b = ds.train_batch(step, m, r, W, B, G);
      parts.push_back(targets ? b.y : b.x);
    }
  return at::cat(parts);
}

TEST_CASE("sequential: the global batch does not depend on how W*B*G is split", "[data][windows]") {
  const Dataset ds = test::counting_dataset(2001, 16, 0.1);  // 125 windows: 112 train, 13 held out
  const std::vector<std::array<int, 3>> splits = {{1, 8, 1}, {2, 4, 1}, {4, 2, 1}, {2, 2, 2}, {1, 1, 8}, {8, 1, 1}};
  for (int64_t step : {0, 1, 13, 14, 1001}) {  // 14*8 = 112: step 14 starts the second pass
    const at::Tensor x_ref = global_batch(ds, step, 1, 8, 1);
    const at::Tensor y_ref = global_batch(ds, step, 1, 8, 1, true);
    for (const auto& [W, B, G] : splits) {
      INFO("step " << step << " W " << W << " B " << B << " G " << G);
      CHECK(global_batch(ds, step, W, B, G).equal(x_ref));
      CHECK(global_batch(ds, step, W, B, G, true).equal(y_ref));
    }
  }
}

TEST_CASE("validation: held-out windows never train; val_batch sweeps each exactly once", "[data][windows]") {
  const Dataset ds = test::counting_dataset(2001, 16, 0.1);  // windows 112..124 held out
  for (int64_t step = 0; step < 60; ++step)  // 60*2*3*2 = 720 samples: more than 6 passes
    for (int m = 0; m < 2; ++m)
      for (int r = 0; r < 2; ++r)
        for (int64_t k : test::windows_of(ds.train_batch(step, m, r, 2, 3, 2))) {
          REQUIRE(k >= 0);
          REQUIRE(k < 112);
        }

  REQUIRE(ds.num_val_batches(5) == 3);
  std::vector<int64_t> swept;
  for (int64_t i = 0; i < ds.num_val_batches(5); ++i) {
    const auto ks = test::windows_of(ds.val_batch(i, 5));
    CHECK(ks.size() == (i < 2 ? 5u : 3u));  // 13 = 5 + 5 + 3
    swept.insert(swept.end(), ks.begin(), ks.end());
  }
  std::vector<int64_t> expected(13);
  std::iota(expected.begin(), expected.end(), int64_t{112});
  CHECK(swept == expected);
  CHECK(test::windows_of(ds.val_batch(0, 5)) == test::windows_of(ds.val_batch(0, 5)));  // deterministic
  CHECK_THROWS_WITH(ds.val_batch(3, 5), Contains("validation batch 3 does not exist"));
  CHECK_THROWS_AS(ds.val_batch(-1, 5), DataError);

  const Dataset no_val = test::counting_dataset(2001, 16);
  CHECK(no_val.num_val_batches(4) == 0);
  CHECK_THROWS_WITH(no_val.val_batch(0, 4), Contains("evaluation is off"));
}

ACCEL_ASSERT_CHECK_IS_CATCH();
