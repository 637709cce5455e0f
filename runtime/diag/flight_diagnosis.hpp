// The diagnosis of a collective fault from every rank's flight records (docs/design/0025): which
// rank is behind or diverged, the collective it is in, the first sequence number where the ranks
// disagree, and each rank's last completed op. A pure function, torch-free: the launcher feeds it
// the dumps it read and what it knows of its workers' processes; tests feed it synthetic records.
// Invariant: the same input gives the same text; ops issued after detected_at_ns count as not
// issued (a rank continued for its dump must not look as if it had arrived).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/diag/flight_records.hpp"

namespace accel::flight {

// What the launcher knows of one worker's process when it collected the records.
struct RankFacts {
  enum class Process { Unknown, Running, Stopped, Exited, Killed };
  int rank = -1;
  Process process = Process::Unknown;
  int exit_code = 0;  // for Exited
  std::string how;    // "exited with code 1", "was killed by signal 9 (SIGKILL)", "stopped (process state T: ...)"
};

struct DiagnosisInput {
  int world = 0;               // 0: taken from the dumps
  int64_t detected_at_ns = 0;  // when the launcher saw the failure (system clock); 0: no cutoff
  std::vector<RankDump> dumps;
  std::vector<RankFacts> facts;
};

// In order of precedence: the first that holds in any group is reported.
enum class Finding {
  Diverged,    // at some sequence number a rank issued another op, size, dtype or root than its peers
  OtherGroup,  // a rank issued on another group the op its peers wait for on this one
  Missing,     // a rank that exited, was killed or is stopped left no records
  Behind,      // a rank never issued the op its peers are in (stopped, slow, finished early)
  Late,        // every rank issued it, one long after the others
  InFlight,    // every rank is in the same op, none late (after a timeout: the op itself did not complete)
  Agree,       // every rank completed the same ops and none is in one: the failure is elsewhere
  NoRecords,   // no rank left records
};
const char* to_string(Finding finding);

struct Diagnosis {
  Finding finding = Finding::NoRecords;
  std::vector<int> ranks;            // the ranks at fault (empty when none is)
  std::string group;                 // where: the group and sequence number of the op at fault
  uint64_t seq = 0;
  std::string op;                    // the faulty rank's op at a divergence, else the op its peers are in
  uint64_t first_disagreement = 0;   // the first sequence number (in `group`) where ranks differ; 0: none
  std::string headline;              // one line a person can act on
  std::vector<std::string> lines;    // the disagreement, then one line per rank
};

Diagnosis diagnose(const DiagnosisInput& input);

// The headline and the lines, one per line, each prefixed with `prefix`; ends with a newline.
std::string render(const Diagnosis& diagnosis, const std::string& prefix = "");

}  // namespace accel::flight
