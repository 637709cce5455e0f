// How the ranks agree that an asynchronous checkpoint is complete before `latest` moves
// (docs/design/0028). Each rank writes its files on a background thread while its training thread
// goes on issuing collectives, so the ranks cannot meet in a collective on the training
// communicator; they meet in the rendezvous store instead. Rank r posts its report (the files it
// wrote, hashed and fsynced, or what failed) under <base>rank/<r> and counts itself in
// <base>reported; each storage group's writer polls that one counter until every rank reported,
// reads the reports once, commits when all succeeded, and posts the outcome under
// <base>commit/<g>; the other ranks of the group wait for it. Each rank removes the keys it
// wrote once every rank is past the checkpoint (forget()), so the store does not grow with the
// saves. Torch-free: the store is reached through a Mailbox (a TCPStore client in the workers, a
// map in tests).
// Invariants: a writer commits only once every rank of the job has reported success (so no group
// commits a checkpoint another group could not write); every rank ends with its group's outcome;
// a wait ends when its keys are there, when it is abandoned, or after its timeout (CheckpointError
// naming the ranks that did not answer).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint_store.hpp"

namespace accel::checkpoint {

struct Mailbox {
  std::function<void(const std::string& key, const std::string& value)> set;
  std::function<std::optional<std::string>(const std::string& key)> try_get;  // nullopt: not set yet
  std::function<int64_t(const std::string& key, int64_t delta)> add;          // atomic; returns the sum
  std::function<void(const std::string& key)> erase;
};

// One rank's part of a checkpoint.
struct RankReport {
  std::vector<FileEntry> files;  // the files it wrote, hashed and fsynced
  std::string error;             // empty: written; otherwise what failed (the file and the OS error)
  bool ok() const { return error.empty(); }
};

// Where one checkpoint's agreement happens and who takes part.
struct CommitExchange {
  Mailbox mailbox;
  std::string base;               // key prefix unique to this checkpoint (attempt and save number)
  int rank = 0;
  int world_size = 1;
  std::vector<int> group_of_rank;  // storage group of each rank; empty: one storage
  bool writer = false;             // this rank commits for its storage group
  std::chrono::milliseconds timeout{0};

  int group(int r) const { return group_of_rank.empty() ? 0 : group_of_rank.at(size_t(r)); }

  void post_report(const RankReport& report) const;
  // Writer: every rank's report, by rank; nullopt when abandoned first.
  std::optional<std::vector<RankReport>> gather_reports(const std::atomic<bool>& abandon) const;
  // Writer: the group's outcome; `error` empty means committed.
  void post_outcome(const std::string& error) const;
  // Every rank but the writer: its group's outcome ("" committed, else the error); nullopt when
  // abandoned first.
  std::optional<std::string> wait_outcome(const std::atomic<bool>& abandon) const;
  // Removes the keys this rank wrote. Call once no rank reads them any more: when every rank has
  // finished this checkpoint (the next checkpoint's barrier has passed).
  void forget() const;
};

// "rank 3: <error>" for the lowest failed rank (with a count of the others), "" when all succeeded.
std::string first_failure(const std::vector<RankReport>& reports);
// The reports' files per storage group, for merge_group_files (node_local.hpp); groups in order.
std::vector<std::vector<FileEntry>> files_of_groups(const CommitExchange& exchange, int num_groups,
                                                    const std::vector<RankReport>& reports);

std::string report_to_text(const RankReport& report);
RankReport report_from_text(const std::string& text);

}  // namespace accel::checkpoint
