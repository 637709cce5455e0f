// The checkpoint store: where checkpoints live on disk, how one is committed atomically, how the
// newest one is found, and how one is verified before anything reads it. Torch-free: the launcher
// links it too. Layout and rationale: docs/design/0004-backend-and-checkpoints.md "Checkpoint layout".
//
//   <output_dir>/checkpoints/          the root
//     latest                           "step_00000020\n": the newest complete checkpoint
//     step_00000020/                   a complete checkpoint (manifest.json present and consistent)
//       manifest.json                  written last; every other file with its size and FNV-1a 64 hash
//       ...                            whatever the trainer wrote (trainer.json, *.safetensors, ...)
//     .tmp.step_00000030/              being written; never read, removed by the next begin_checkpoint
//
// Invariants:
//  - A step_N directory only ever appears by rename of a tmp directory whose manifest.json was
//    already written and fsynced, so a step_N directory without manifest.json is not a checkpoint.
//  - `latest` only ever changes by rename, after the step_N directory it names was renamed into
//    place and the root fsynced: a crash leaves the old `latest` or the new one, both complete.
//  - The manifest lists every regular file of the directory except itself. Files found in the
//    directory but not in the manifest are ignored by verification (they were added afterwards
//    and nothing reads them); a listed file that is missing, resized or changed is an error.
//  - Nothing falls back silently: a damaged checkpoint is a CheckpointError naming the file, what
//    differs and what the user can do (delete it, or set training.resume to another directory).
//  - One writer per root at a time: begin_checkpoint and commit_checkpoint are called by one
//    process (rank 0, or each storage group's first rank on node-local storage, design 0013);
//    other ranks only write files into the directory begin_checkpoint returned.
//  - Node-local storage (manifest version 2): every machine's manifest lists the files of all
//    machines, each with the machines holding it; a file held only elsewhere may be absent.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/common/errors.hpp"

namespace accel::checkpoint {

// Every problem with a checkpoint on disk. The message names the file (full path), what is wrong
// and how to fix it.
class CheckpointError : public RunError {
 public:
  using RunError::RunError;
};

// "format" and "version" in manifest.json; a reader refuses other values.
inline constexpr const char* kManifestFormat = "accel-checkpoint";
inline constexpr int kManifestVersion = 1;           // one storage (every file in the directory)
inline constexpr int kNodeLocalManifestVersion = 2;  // node-local storage: files carry their machines
inline constexpr const char* kManifestName = "manifest.json";
inline constexpr const char* kLatestName = "latest";

// <output_dir>/checkpoints
std::string checkpoints_root(const std::string& output_dir);

// "step_00000020": 8 digits, more when the step needs them (so names sort by step up to 10^8).
// std::invalid_argument for a negative step.
std::string step_dir_name(int64_t step);

struct FileEntry {
  std::string name;     // a plain file name inside the checkpoint directory (no '/')
  uint64_t bytes = 0;
  uint64_t fnv1a64 = 0;  // stored in JSON as 16 lowercase hex digits (JSON numbers lose 64-bit ints)
  std::vector<int> machines;  // node-local: the machines whose storage holds it (sorted); empty: all
};

struct Manifest {
  int format_version = kManifestVersion;
  int64_t step = 0;
  std::vector<FileEntry> files;           // sorted by name; manifest.json itself is not listed
  nlohmann::json extra = nlohmann::json::object();  // free-form, filled by the trainer
  int num_machines = 1;                   // version 2: the machines of the job that wrote it
  // Filled by verify_checkpoint: listed files held only by other machines and absent here.
  std::vector<FileEntry> elsewhere;
  bool node_local() const { return format_version == kNodeLocalManifestVersion; }
};

// FNV-1a 64 of a file's bytes, read in 1 MiB chunks. CheckpointError when it cannot be read.
uint64_t fnv1a64_file(const std::string& path);

// Writes `contents` to `path` (created or truncated), flushes, fsyncs and closes it, checking
// every step: a full disk or an I/O error is a CheckpointError, never a silently short file.
// Never through a symbolic link at `path`: that is a UsageError naming it (files::link_refusal).
// Not atomic by itself; inside a checkpoint directory atomicity comes from the directory rename.
void write_file_synced(const std::string& path, std::string_view contents);

// Starts checkpoint `step` under `root` (created if needed). Removes every leftover `.tmp.*` entry
// in root (crashed writers, including a stale .tmp.step_N of this step) and a stale latest.tmp,
// creates root/.tmp.step_N and returns its path. Call from one process (rank 0) only, then let
// every rank write its files into the returned directory (a shared file system for multi-node).
std::string begin_checkpoint(const std::string& root, int64_t step);

// Finishes checkpoint `step` after every rank has written its files: hashes every regular file of
// the tmp directory, writes manifest.json (tmp + fsync + rename), fsyncs the files and the
// directory, renames it to root/step_N, then replaces root/latest atomically and fsyncs root.
// If root/step_N already exists (a rerun from an older checkpoint) it is replaced: it is moved
// aside to a `.tmp.*` name, the new directory renamed in, then the old one deleted; a crash in
// between leaves no step_N (the old `latest` may then name a missing directory, which
// find_latest_checkpoint reports) and the aside copy is removed by the next begin_checkpoint.
// `extra` must be a JSON object (null is stored as {}). Subdirectories, symlinks or other
// non-regular entries in the tmp directory are a CheckpointError: they could not be verified.
// Returns the final directory path.
std::string commit_checkpoint(const std::string& root, int64_t step, const nlohmann::json& extra);

// Node-local storage (design 0013), in two halves around an exchange between the machines:
// hash_staged_files fsyncs and hashes every regular file of root/.tmp.step_N (as commit_checkpoint
// does; same errors); commit_node_local then commits that directory with `files`, the list of every
// machine's files (node_local.hpp merges them), as a version 2 manifest. Every file staged here
// must be listed, else CheckpointError.
std::vector<FileEntry> hash_staged_files(const std::string& root, int64_t step);
std::string commit_node_local(const std::string& root, int64_t step, const nlohmann::json& extra,
                              const std::vector<FileEntry>& files, int num_machines);

// Asynchronous checkpoints (docs/design/0028): each rank hashes and fsyncs the files it wrote
// itself (hash_files: `names` inside `dir`, in that order; same errors as commit_checkpoint), and
// one writer commits root/.tmp.step_N with every rank's list as a version 1 manifest, without
// reading the files again. Every file staged must be listed, and every listed file must be there
// with its listed size, else CheckpointError.
std::vector<FileEntry> hash_files(const std::string& dir, const std::vector<std::string>& names);
std::string commit_listed(const std::string& root, int64_t step, const nlohmann::json& extra,
                          const std::vector<FileEntry>& files);

// The directory root/latest names, or std::nullopt when root or root/latest does not exist (no
// checkpoint yet: not an error). An empty or malformed latest, or one naming a directory that does
// not exist, is a CheckpointError naming root/latest. Does not verify the checkpoint.
std::optional<std::string> find_latest_checkpoint(const std::string& root);

// Parses dir/manifest.json and checks its shape (format, version, step, files, extra). A missing
// manifest means "not a complete checkpoint"; invalid JSON or a wrong/missing key is an error
// naming manifest.json. Does not look at the other files.
Manifest read_manifest(const std::string& dir);

// read_manifest, then checks that every listed file exists with exactly the recorded size and
// FNV-1a 64 hash. All differences are reported in one CheckpointError, one line per file naming
// its full path ("is missing", "is truncated: N bytes, the manifest records M", "is larger than
// the manifest records", "is corrupted: its FNV-1a 64 hash is 0x.. but the manifest records 0x..").
// Call before anything parses the checkpoint's files. Returns the manifest.
// Node-local checkpoints: a listed file held only by other machines may be absent (it is returned
// in Manifest::elsewhere); `machine` (>= 0) makes the files that machine holds required.
Manifest verify_checkpoint(const std::string& dir, int machine = -1);

}  // namespace accel::checkpoint
