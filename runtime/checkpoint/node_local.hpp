// Node-local checkpoints (docs/design/0013): which machines share the output directory, the
// exchange that lets every storage group's writer commit a manifest of all machines' files, and
// the note that tells a reader where absent files are. Torch-free: the launcher links it too.
// Invariants: every rank of a job computes the same StorageLayout from the same probe answers;
// merge_group_files gives every group the identical list, so all manifests of a step are equal.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint_store.hpp"

namespace accel::checkpoint {

// The rendezvous store as the probe and the commit need it: set a key, and get one, waiting
// until some rank has set it (the store's timeout bounds the wait).
struct KeyValueExchange {
  std::function<void(const std::string& key, const std::string& value)> set;
  std::function<std::string(const std::string& key)> get;
};

// Which machines see the same output directory. groups[g] is a sorted list of machine ranks;
// groups are ordered by their first machine, so group 0 holds machine 0.
struct StorageLayout {
  std::vector<std::vector<int>> groups = {{0}};

  bool shared() const { return groups.size() == 1; }
  int num_machines() const;
  int group_of_machine(int machine) const;  // std::out_of_range for an unknown machine
  // "output_dir is shared by all 2 machines" / "output_dir is node-local: machines {0}, {1} ..."
  std::string describe() const;
};

// Collective over the machines' first workers (every rank calls it; ranks with local_rank != 0
// only read the answers). Machine `machine`'s first worker creates `output_dir`, writes a marker
// file named after `nonce` and its machine rank, waits for every machine's marker, reports which
// markers it sees, and removes its own once all have reported. RunError when output_dir cannot be
// created or written, or when what machines see is not an equivalence (names the machines).
StorageLayout probe_storage(const std::string& output_dir, int machine, int num_machines, bool first_on_machine,
                            const std::string& nonce, const std::string& key_prefix, const KeyValueExchange& kv);

// The groups' answers, pure: sees[m] lists the machines whose markers machine m found.
StorageLayout storage_layout_from_sightings(const std::vector<std::vector<int>>& sees);

// One manifest file list from each group's staged files: a name staged by several groups must
// have the same size and hash (replicated state) and lists the machines of all of them.
// CheckpointError naming the file and the machines when replicas differ.
std::vector<FileEntry> merge_group_files(const StorageLayout& layout,
                                         const std::vector<std::vector<FileEntry>>& files_of_group);

// FileEntry lists through the store (names, sizes and hashes; machines are added by the merge).
std::string files_to_text(const std::vector<FileEntry>& files);
std::vector<FileEntry> files_from_text(const std::string& text);

// "" for a checkpoint with nothing elsewhere; otherwise a paragraph naming the machines holding
// absent files (a few names each) and how to assemble a complete copy of `dir`.
std::string elsewhere_note(const Manifest& verified, const std::string& dir);

}  // namespace accel::checkpoint
