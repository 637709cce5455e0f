// Collective flight records as one rank dumps them (<run_dir>/flight/rank<N>.json) and the launcher
// reads them back: the ops each of its communicators (groups) ran last, oldest first
// (docs/design/0025). Torch-free: written by the worker's recorder, read by the launcher.
// Invariant: rank_dump_from_json(to_json(d)) == d; an op's signature (op, count, dtype, root) is
// the same on every rank that issued the same collective.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accel::flight {

enum class OpState { Running, Completed, Failed };
const char* to_string(OpState state);

struct OpRecord {
  uint64_t seq = 0;        // 1-based, per group: the n-th op issued on that communicator
  uint64_t order = 0;      // 1-based issue order over every group of the process
  std::string op;          // "all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier"
  std::string dtype;       // "float32", ...; "" for a barrier
  int64_t count = 0;       // elements of the full buffer (reduce_scatter's input, all_gather's output)
  int64_t bytes = 0;       // count * element size
  int root = -1;           // broadcast's root, else -1
  int64_t issued_ns = 0;   // system clock, ns since the epoch
  int64_t started_ns = 0;
  int64_t ended_ns = 0;    // 0 while running
  OpState state = OpState::Running;

  bool operator==(const OpRecord&) const = default;
};

// Equal on every rank for the same collective: what the ranks must agree on.
bool same_signature(const OpRecord& a, const OpRecord& b);
// "all_reduce of 1064 float32 (4.16 KiB)", "barrier", "broadcast of 8 int64 (64 B) from rank 0".
std::string describe_op(const OpRecord& op);

struct GroupRecords {
  std::string name;           // "world", "world/split0/color1"
  std::vector<int> members;   // global ranks, in group-rank order
  int group_rank = 0;
  int64_t timeout_ms = 0;     // the communicator's collective timeout
  uint64_t issued = 0;        // ops issued on it so far (the newest may be queued, not yet started)
  uint64_t torn = 0;          // slots left out: rewritten during every attempt to copy them
  bool closed = false;        // the communicator was destroyed before the dump
  std::vector<OpRecord> records;  // oldest first

  bool operator==(const GroupRecords&) const = default;
};

struct RankDump {
  int rank = -1;              // global rank (RANK)
  int world = 0;
  int pid = 0;
  std::string host;
  // The host of every rank of the world (index: global rank), as this rank read them from the
  // rendezvous store when it started; empty when unknown. Lets a launcher name the machine of a
  // rank whose records it cannot read (another machine's output_dir).
  std::vector<std::string> hosts;
  std::string reason;         // why it dumped: "signal", "collective failed: ...", "communicator closed"
  int64_t dumped_at_ns = 0;
  std::vector<GroupRecords> groups;

  bool operator==(const RankDump&) const = default;
};

std::string to_json(const RankDump& dump);
// Throws std::runtime_error naming `where` (the file) when the text is not a dump.
RankDump rank_dump_from_json(const std::string& text, const std::string& where);

}  // namespace accel::flight
