// Node-local checkpoints (docs/design/0013) on real temporary directories, one per "machine":
// the storage probe through an in-memory store with one thread per machine, the layout from what
// machines see, the merge of the machines' file lists, and verification that knows which files
// are on other machines.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "runtime/checkpoint/node_local.hpp"
#include "support/temp_dir.hpp"

using namespace accel;
using namespace accel::checkpoint;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// The rendezvous store's semantics: get waits until the key is set.
class MemoryStore {
 public:
  KeyValueExchange exchange() {
    return {[this](const std::string& k, const std::string& v) {
              std::lock_guard<std::mutex> lock(mutex_);
              values_[k] = v;
              changed_.notify_all();
            },
            [this](const std::string& k) {
              std::unique_lock<std::mutex> lock(mutex_);
              if (!changed_.wait_for(lock, std::chrono::seconds(10), [&] { return values_.count(k) > 0; }))
                throw std::runtime_error("store get timed out: " + k);
              return values_[k];
            }};
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

// Every machine's first worker probes its own directory at once; returns each machine's answer.
std::vector<StorageLayout> probe_all(const std::vector<std::string>& dirs) {
  MemoryStore store;
  const int n = int(dirs.size());
  std::vector<StorageLayout> layouts(static_cast<size_t>(n));
  std::vector<std::thread> machines;
  for (int m = 0; m < n; ++m)
    machines.emplace_back([&, m] { layouts[size_t(m)] = probe_storage(dirs[size_t(m)], m, n, true, "n1", "p/", store.exchange()); });
  for (auto& t : machines) t.join();
  return layouts;
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  REQUIRE(out.good());
}

std::vector<FileEntry> stage(const std::string& root, int64_t step, const std::map<std::string, std::string>& files) {
  const std::string tmp = begin_checkpoint(root, step);
  for (const auto& [name, bytes] : files) write_bytes(fs::path(tmp) / name, bytes);
  return hash_staged_files(root, step);
}

}  // namespace

TEST_CASE("the storage probe: one directory is shared, separate ones are node-local, markers are removed") {
  test::TempDir a, b, c;
  const std::string shared = (a.path() / "out").string();
  for (const auto& layout : probe_all({shared, shared, shared})) {
    CHECK(layout.shared());
    CHECK(layout.describe() == "output_dir is shared by all 3 machines");
  }
  std::vector<std::string> separate = {(a.path() / "o").string(), (b.path() / "o").string(), (c.path() / "o").string()};
  for (const auto& layout : probe_all(separate)) {
    CHECK(layout.groups == std::vector<std::vector<int>>{{0}, {1}, {2}});
    CHECK_THAT(layout.describe(), Contains("node-local (3 separate storages: machine 0; machine 1; machine 2)"));
  }
  // Machines 0 and 2 on one storage, machine 1 alone.
  const std::string other = (b.path() / "x").string();
  for (const auto& layout : probe_all({shared, other, shared})) {
    CHECK(layout.groups == std::vector<std::vector<int>>{{0, 2}, {1}});
    CHECK(layout.group_of_machine(2) == 0);
    CHECK(layout.group_of_machine(1) == 1);
  }
  for (const auto& dir : {shared, other})
    for (const auto& entry : fs::directory_iterator(dir))
      FAIL("marker left behind: " << entry.path());
}

TEST_CASE("what machines see must be an equivalence; the error names the machines") {
  CHECK(storage_layout_from_sightings({{0, 1}, {0, 1}}).shared());
  CHECK(storage_layout_from_sightings({{0}, {1}}).groups.size() == 2);
  CHECK_THROWS_WITH(storage_layout_from_sightings({{0, 1}, {1}}),
                    Contains("machine 0 sees the output_dir of machines {0, 1} but machine 1 sees {1}"));
  CHECK_THROWS_WITH(storage_layout_from_sightings({{1}, {1}}), Contains("machine 0 cannot see the marker file it wrote"));
}

TEST_CASE("merging the machines' file lists: shared names list every holder, diverged replicas are an error") {
  StorageLayout layout;
  layout.groups = {{0}, {1, 2}};
  std::vector<FileEntry> g0 = {{"trainer.json", 5, 11, {}}, {"zero_rank_00000.safetensors", 9, 22, {}}};
  std::vector<FileEntry> g1 = {{"rng_rank_00002.safetensors", 3, 33, {}}, {"trainer.json", 5, 11, {}}};
  auto merged = merge_group_files(layout, {g0, g1});
  REQUIRE(merged.size() == 3);
  CHECK(merged[0].name == "rng_rank_00002.safetensors");
  CHECK(merged[0].machines == std::vector<int>{1, 2});
  CHECK(merged[1].name == "trainer.json");
  CHECK(merged[1].machines == std::vector<int>{0, 1, 2});
  CHECK(merged[2].machines == std::vector<int>{0});
  g1[1].fnv1a64 = 12;
  CHECK_THROWS_WITH(merge_group_files(layout, {g0, g1}),
                    Contains("trainer.json differs between machines 0 and 1, 2") && Contains("diverged"));
  CHECK(files_from_text(files_to_text(g0))[1].fnv1a64 == 22);
}

TEST_CASE("a node-local checkpoint: each machine verifies its own files, and a merged copy verifies whole") {
  test::TempDir m0, m1;
  const std::string root0 = checkpoints_root(m0.path().string()), root1 = checkpoints_root(m1.path().string());
  StorageLayout layout;
  layout.groups = {{0}, {1}};
  auto files0 = stage(root0, 10, {{"trainer.json", "{}"}, {"zero_rank_00000.safetensors", "shard0"}});
  auto files1 = stage(root1, 10, {{"trainer.json", "{}"}, {"zero_rank_00001.safetensors", "shard1"}});
  const auto all = merge_group_files(layout, {files0, files1});
  const nlohmann::json extra{{"world_size", 2}};
  const std::string dir0 = commit_node_local(root0, 10, extra, all, 2);
  const std::string dir1 = commit_node_local(root1, 10, extra, all, 2);
  CHECK(find_latest_checkpoint(root1) == std::optional<std::string>(dir1));
  // Identical manifests: a merged directory has one manifest that fits every machine's files.
  std::ifstream a(dir0 + "/manifest.json"), b(dir1 + "/manifest.json");
  CHECK(std::string(std::istreambuf_iterator<char>(a), {}) == std::string(std::istreambuf_iterator<char>(b), {}));

  Manifest here = verify_checkpoint(dir0, 0);
  CHECK(here.node_local());
  CHECK(here.num_machines == 2);
  REQUIRE(here.elsewhere.size() == 1);
  CHECK(here.elsewhere[0].name == "zero_rank_00001.safetensors");
  CHECK(verify_checkpoint(dir0).elsewhere.size() == 1);  // no machine given: anything elsewhere may be absent
  // Machine 1's file absent from the storage of whoever is machine 1 now: another machine's disk
  // (machines renumbered by an elastic restart) as likely as a loss, so no "damaged", deletion last.
  CHECK_THROWS_WITH(verify_checkpoint(dir0, 1), Contains("zero_rank_00001.safetensors is missing (the manifest "
                                                         "says machine 1's storage held it)") &&
                                                    Contains("is node-local and files this machine (1)") &&
                                                    Contains("elected another rendezvous host") &&
                                                    Contains("copy every machine's step_00000010 directory") &&
                                                    !Contains("is damaged"));
  const std::string note = elsewhere_note(here, dir0);
  CHECK_THAT(note, Contains("machine 1 holds 1: zero_rank_00001.safetensors") && Contains("rsync -a") &&
                       Contains("step_00000010"));

  fs::remove(dir0 + "/trainer.json");  // held by every machine: never "elsewhere"
  CHECK_THROWS_WITH(verify_checkpoint(dir0, 0), Contains("trainer.json is missing"));
  fs::copy_file(dir1 + "/trainer.json", dir0 + "/trainer.json");
  fs::copy_file(dir1 + "/zero_rank_00001.safetensors", dir0 + "/zero_rank_00001.safetensors");  // the merge
  CHECK(verify_checkpoint(dir0).elsewhere.empty());
  CHECK(elsewhere_note(verify_checkpoint(dir0), dir0).empty());
  write_bytes(dir0 + "/zero_rank_00001.safetensors", "shardX");  // a copied file is verified too
  CHECK_THROWS_WITH(verify_checkpoint(dir0), Contains("zero_rank_00001.safetensors is corrupted"));
}

TEST_CASE("commit_node_local refuses a staged file the machines' list does not name") {
  test::TempDir m0;
  const std::string root = checkpoints_root(m0.path().string());
  auto files = stage(root, 3, {{"a", "1"}, {"b", "2"}});
  files.pop_back();
  StorageLayout layout;
  layout.groups = {{0}, {1}};
  CHECK_THROWS_WITH(commit_node_local(root, 3, {}, merge_group_files(layout, {files, {}}), 2),
                    Contains("b was staged here but is not in the machines' file list"));
}
