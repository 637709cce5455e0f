// The launcher's side of the collective flight recorder (docs/design/0025): clears this launcher's
// ranks' old dumps before a generation starts; on a failure or an interrupt asks its live workers
// for their records (SIGUSR2 to those that catch it), tells when every
// dump asked for has arrived (a new file), then reads every dump in the directory, diagnoses and
// writes the diagnosis beside them. No torch.
// Invariants: a worker is signalled only when /proc says it handles SIGUSR2, so a program without
// accel's recorder is never killed by the request; a dump counts as arrived only when its file is a
// new one (another inode) since the request; nothing here waits: the caller polls.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/diag/flight_diagnosis.hpp"

namespace accel::launch {

// True when process `pid` has a handler for `signal` (its SigCgt mask in /proc/<pid>/status).
bool catches_signal(pid_t pid, int signal);

// <dir>/rank<rank>.json
std::string flight_dump_path(const std::string& dir, int rank);

class FlightCollection {
 public:
  // `dir` is <output_dir>/flight; `diagnosis_file` where the diagnosis is written.
  FlightCollection(std::string dir, std::string diagnosis_file);

  // Before a generation starts: creates the directory and removes the dumps of `ranks` (a previous
  // attempt's records must not be read as this one's). Returns "" or why it could not.
  std::string prepare(const std::vector<int>& ranks) const;

  // Asks the workers (rank, pid) for a dump; `now_ns` (system clock) is the diagnosis' cutoff. The
  // caller leaves stopped workers out: continued, one would go on and could end on its own.
  void request(const std::vector<std::pair<int, pid_t>>& live, int64_t now_ns);
  // A worker asked for a dump is gone: wait no longer for it.
  void forget(int rank) { awaited_.erase(rank); }
  // True once every dump asked for has arrived (or no worker was asked).
  bool complete();

  // Reads every rank<N>.json in the directory, diagnoses with `facts`, writes the diagnosis file.
  // Returns the text to print, each line prefixed "[flight] "; "" when no rank recorded a collective.
  std::string diagnose(const std::vector<flight::RankFacts>& facts, int world);

 private:
  struct FileId {
    bool exists = false;
    dev_t dev = 0;
    ino_t ino = 0;
    bool operator==(const FileId&) const = default;
  };
  static FileId identify(const std::string& path);

  std::string dir_;
  std::string diagnosis_file_;
  int64_t requested_at_ns_ = 0;
  std::map<int, FileId> awaited_;  // rank -> its file when the dump was asked for
};

}  // namespace accel::launch
