// What a Hugging Face model folder holds, from its index and safetensors headers alone (no tensor
// data, no torch): model.safetensors, or model.safetensors.index.json naming shard files. The
// launcher checks a folder against the family's table (hf_family.hpp) with it before any worker
// starts, so a missing, extra or mis-shaped tensor is one exit-2 error listing every one; workers
// use the same listing to find each tensor's file.
// Invariants: file names come from the index and must be plain names inside the folder (no '/',
// no symbolic link followed); a header longer than its file or than 100 MiB is refused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/hf/hf_family.hpp"

namespace accel::hf {

struct StoredTensor {
  std::string name;            // as in the file
  std::string file;            // its file's name inside the folder
  std::string dtype;           // safetensors dtype name: F32, BF16, F16, ...
  std::vector<int64_t> shape;
};

struct FolderContents {
  std::string dir;
  std::vector<std::string> files;     // in index order (one file without an index)
  std::vector<StoredTensor> tensors;  // every tensor of every file
  const StoredTensor* find(const std::string& name) const;
};

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kConfigFile = "config.json";

// Lists `dir`. Throws accel::UsageError naming the file for: no weights file, an unreadable or
// malformed index or header, an index naming a file outside the folder or a tensor its file lacks.
FolderContents read_folder(const std::string& dir);

// Every problem of `contents` against `family`, one line each naming the tensor and its file: a
// tensor the model needs that is absent, one it does not have, a shape that differs, a dtype that
// is not F32, BF16 or F16. Empty: the folder loads.
std::vector<std::string> check_folder(const FolderContents& contents, const Family& family);

}  // namespace accel::hf
