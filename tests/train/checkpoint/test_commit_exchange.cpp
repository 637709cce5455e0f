// The agreement behind asynchronous checkpoints (runtime/checkpoint/commit_exchange.hpp, docs/design
// 0028) on real temporary directories, one thread per rank over an in-memory store: `latest` moves
// only once every rank reported its files; a rank's failure, or a rank that never reports, leaves
// `latest` on the previous checkpoint and reaches every rank; an abandoned wait returns at once.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "runtime/checkpoint/commit_exchange.hpp"
#include "support/temp_dir.hpp"

using namespace accel;
using namespace accel::checkpoint;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

class MemoryMailbox {
 public:
  Mailbox mailbox() {
    return {[this](const std::string& k, const std::string& v) {
              std::lock_guard<std::mutex> lock(mu_);
              values_[k] = v;
            },
            [this](const std::string& k) -> std::optional<std::string> {
              std::lock_guard<std::mutex> lock(mu_);
              auto it = values_.find(k);
              if (it == values_.end()) return std::nullopt;
              return it->second;
            },
            [this](const std::string& k, int64_t delta) {
              std::lock_guard<std::mutex> lock(mu_);
              const int64_t sum = (values_.count(k) ? std::stoll(values_[k]) : 0) + delta;
              values_[k] = std::to_string(sum);
              return sum;
            },
            [this](const std::string& k) {
              std::lock_guard<std::mutex> lock(mu_);
              values_.erase(k);
            }};
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return values_.size();
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> values_;
};

CommitExchange exchange_for(MemoryMailbox& box, int rank, int world, std::chrono::milliseconds timeout) {
  CommitExchange x;
  x.mailbox = box.mailbox();
  x.base = "accel/0/async_checkpoint/7/";
  x.rank = rank;
  x.world_size = world;
  x.writer = rank == 0;
  x.timeout = timeout;
  return x;
}

std::string rank_file(int r) { return "zero_rank_0000" + std::to_string(r) + ".safetensors"; }

// What each rank does on its background thread: write its file (or fail), report, and commit
// (rank 0) or wait for the outcome. Returns each rank's outcome ("" committed).
std::vector<std::string> run_ranks(const std::string& root, int64_t step, int world, int failing_rank,
                                   int silent_rank, std::chrono::milliseconds timeout) {
  MemoryMailbox box;
  const std::string staging = begin_checkpoint(root, step);
  std::vector<std::string> outcome(size_t(world), "<none>");
  std::atomic<bool> abandon{false};
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      const CommitExchange x = exchange_for(box, r, world, timeout);
      RankReport mine;
      if (r == failing_rank) {
        mine.error = "cannot write " + staging + "/" + rank_file(r) + ": No space left on device";
      } else {
        std::ofstream(staging + "/" + rank_file(r)) << "shard of rank " << r << " at step " << step;
        mine.files = hash_files(staging, {rank_file(r)});
      }
      if (r == silent_rank) return;  // killed before it reported
      x.post_report(mine);
      try {
        if (!x.writer) {
          outcome[size_t(r)] = *x.wait_outcome(abandon);
          return;
        }
        const auto reports = x.gather_reports(abandon);
        std::string error = first_failure(*reports);
        if (error.empty()) commit_listed(root, step, {{"world_size", world}}, files_of_groups(x, 1, *reports)[0]);
        x.post_outcome(error);
        outcome[size_t(r)] = error;
      } catch (const CheckpointError& e) {
        outcome[size_t(r)] = std::string("threw: ") + e.what();
      }
    });
  for (auto& t : ranks) t.join();
  return outcome;
}

}  // namespace

TEST_CASE("every rank's files are in the manifest and `latest` moves once all reported") {
  test::TempDir dir;
  const std::string root = (dir.path() / "checkpoints").string();
  const auto outcome = run_ranks(root, 4, 4, -1, -1, std::chrono::seconds(10));
  for (const auto& o : outcome) CHECK(o.empty());
  const auto latest = find_latest_checkpoint(root);
  REQUIRE(latest);
  CHECK(fs::path(*latest).filename() == "step_00000004");
  const Manifest m = verify_checkpoint(*latest);  // sizes and hashes as the ranks reported them
  REQUIRE(m.files.size() == 4);
  for (int r = 0; r < 4; ++r) {
    CHECK(m.files[size_t(r)].name == rank_file(r));
    CHECK(m.files[size_t(r)].fnv1a64 == fnv1a64_file(*latest + "/" + rank_file(r)));
  }
  CHECK(m.extra["world_size"] == 4);
}

TEST_CASE("a rank that failed leaves `latest` on the previous checkpoint, and every rank learns it") {
  test::TempDir dir;
  const std::string root = (dir.path() / "checkpoints").string();
  REQUIRE(run_ranks(root, 2, 3, -1, -1, std::chrono::seconds(10)) == std::vector<std::string>(3, ""));
  const auto outcome = run_ranks(root, 4, 3, 2, -1, std::chrono::seconds(10));
  for (const auto& o : outcome) {
    CHECK_THAT(o, Contains("rank 2: cannot write"));
    CHECK_THAT(o, Contains("No space left on device"));
  }
  CHECK(fs::path(*find_latest_checkpoint(root)).filename() == "step_00000002");
  CHECK_FALSE(fs::exists(root + "/step_00000004"));
}

TEST_CASE("a rank that never reports: the writer gives up after the timeout naming it, nothing is committed") {
  test::TempDir dir;
  const std::string root = (dir.path() / "checkpoints").string();
  REQUIRE(run_ranks(root, 2, 3, -1, -1, std::chrono::seconds(10)) == std::vector<std::string>(3, ""));
  const auto outcome = run_ranks(root, 4, 3, -1, 1, std::chrono::milliseconds(300));
  CHECK_THAT(outcome[0], Contains("threw: "));
  CHECK_THAT(outcome[0], Contains("no answer from rank 1 within collective_timeout_s"));
  CHECK(outcome[1] == "<none>");
  CHECK_THAT(outcome[2], Contains("threw: "));  // its wait for the outcome times out too
  CHECK(fs::path(*find_latest_checkpoint(root)).filename() == "step_00000002");
  CHECK_FALSE(fs::exists(root + "/step_00000004"));
}

TEST_CASE("an abandoned wait returns at once without an outcome") {
  MemoryMailbox box;
  std::atomic<bool> abandon{false};
  const CommitExchange writer = exchange_for(box, 0, 2, std::chrono::seconds(60));
  const CommitExchange other = exchange_for(box, 1, 2, std::chrono::seconds(60));
  std::optional<std::vector<RankReport>> reports = std::vector<RankReport>{};
  std::optional<std::string> outcome = "unset";
  std::thread w([&] { reports = writer.gather_reports(abandon); });
  std::thread o([&] { outcome = other.wait_outcome(abandon); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto t0 = std::chrono::steady_clock::now();
  abandon = true;
  w.join();
  o.join();
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK_FALSE(reports.has_value());
  CHECK_FALSE(outcome.has_value());
}

TEST_CASE("commit_listed refuses a staged file no rank listed and a file that changed size") {
  test::TempDir dir;
  const std::string root = (dir.path() / "checkpoints").string();
  const std::string staging = begin_checkpoint(root, 3);
  std::ofstream(staging + "/a.safetensors") << "aaaa";
  std::ofstream(staging + "/b.safetensors") << "bb";
  const auto a = hash_files(staging, {"a.safetensors"});
  CHECK_THROWS_WITH(commit_listed(root, 3, {}, a), Contains("b.safetensors was staged here but no rank listed it"));
  auto both = hash_files(staging, {"a.safetensors", "b.safetensors"});
  std::ofstream(staging + "/b.safetensors", std::ios::app) << "more";
  CHECK_THROWS_WITH(commit_listed(root, 3, {}, both), Contains("b.safetensors has 6 bytes, its writer listed 2"));
  CHECK_FALSE(find_latest_checkpoint(root));
  both = hash_files(staging, {"a.safetensors", "b.safetensors"});
  CHECK(fs::path(commit_listed(root, 3, {}, both)).filename() == "step_00000003");
  CHECK(verify_checkpoint(root + "/step_00000003").files.size() == 2);
}

TEST_CASE("reports survive the store's text form") {
  RankReport ok{{{"x.safetensors", 12, 0xfedcba9876543210ULL, {}}}, ""};
  const RankReport back = report_from_text(report_to_text(ok));
  REQUIRE(back.files.size() == 1);
  CHECK(back.files[0].fnv1a64 == 0xfedcba9876543210ULL);
  CHECK(back.ok());
  CHECK(report_from_text(report_to_text({{}, "disk full"})).error == "disk full");
  CHECK_THAT(report_from_text("garbage").error, Contains("unreadable report"));
}

TEST_CASE("once every rank is past a checkpoint its keys leave the store") {
  MemoryMailbox box;
  std::atomic<bool> abandon{false};
  std::vector<CommitExchange> ranks;
  for (int r = 0; r < 3; ++r) ranks.push_back(exchange_for(box, r, 3, std::chrono::seconds(10)));
  for (const auto& x : ranks) x.post_report({{{"f" + std::to_string(x.rank), 1, 2, {}}}, ""});
  REQUIRE(ranks[0].gather_reports(abandon)->size() == 3);
  ranks[0].post_outcome("");
  CHECK(ranks[1].wait_outcome(abandon) == std::string());
  CHECK(box.size() == 5);  // three reports, the count, the outcome
  for (const auto& x : ranks) x.forget();
  CHECK(box.size() == 0);
}
