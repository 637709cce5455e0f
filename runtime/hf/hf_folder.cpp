// Listing and checking a Hugging Face model folder (see hf_folder.hpp).
#include "runtime/hf/hf_folder.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "runtime/common/errors.hpp"
#include "runtime/common/safe_file.hpp"

namespace accel::hf {
namespace {

using Json = nlohmann::json;
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the safetensors reference implementation's limit

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw UsageError(path + ": " + problem);
}

// Reads exactly n bytes at offset, or fails naming the file.
void read_exact(int fd, void* dst, uint64_t n, uint64_t offset, const std::string& path) {
  auto* out = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd, out, n, off_t(offset));
    if (got <= 0) fail(path, got == 0 ? "truncated" : std::string("cannot read: ") + std::strerror(errno));
    out += got;
    n -= uint64_t(got);
    offset += uint64_t(got);
  }
}

std::string read_small_file(const std::string& path) {
  const int fd = files::open_nofollow(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, files::open_error(path, errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || uint64_t(st.st_size) > kMaxHeaderBytes) {
    ::close(fd);
    fail(path, "is not a regular file of at most 100 MiB");
  }
  std::string text(size_t(st.st_size), '\0');
  try {
    read_exact(fd, text.data(), text.size(), 0, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return text;
}

// The header entries of one safetensors file (names, dtypes, shapes; offsets are the engine
// reader's to check when it reads data).
void read_header(const std::string& dir, const std::string& file, std::vector<StoredTensor>& out) {
  const std::string path = dir + "/" + file;
  const int fd = files::open_nofollow(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, files::open_error(path, errno));
  std::string text;
  try {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) fail(path, "is not a regular file");
    uint64_t len = 0;
    if (uint64_t(st.st_size) < 8) fail(path, "is shorter than a safetensors header");
    read_exact(fd, &len, 8, 0, path);  // little-endian u64 (the hosts accel builds for)
    if (len > kMaxHeaderBytes || len > uint64_t(st.st_size) - 8)
      fail(path, "header length " + std::to_string(len) + " is beyond the file or 100 MiB");
    text.resize(size_t(len));
    read_exact(fd, text.data(), len, 8, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  const Json header = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) fail(path, "the safetensors header is not a JSON object");
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() || !entry.contains("shape") ||
        !entry["shape"].is_array())
      fail(path, "tensor '" + name + "' has no dtype and shape in the header");
    StoredTensor t{name, file, entry["dtype"].get<std::string>(), {}};
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(INT64_MAX))
        fail(path, "tensor '" + name + "' has a shape entry that is not a non-negative integer");
      t.shape.push_back(int64_t(d.get<uint64_t>()));
    }
    out.push_back(std::move(t));
  }
}

bool plain_name(const std::string& file) {
  return !file.empty() && file != "." && file != ".." && file.find('/') == std::string::npos;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

const StoredTensor* FolderContents::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

FolderContents read_folder(const std::string& dir) {
  FolderContents c;
  c.dir = dir;
  const std::string index_path = dir + "/" + kIndexFile;
  struct stat st {};
  std::map<std::string, std::string> weight_map;
  if (::lstat(index_path.c_str(), &st) == 0) {
    const Json index = Json::parse(read_small_file(index_path), nullptr, false);
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      fail(index_path, "is not an index: it needs a \"weight_map\" object {tensor: file}");
    for (const auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string() || !plain_name(file.get<std::string>()))
        fail(index_path, "tensor '" + name + "' maps to a file that is not a plain name inside the folder");
      weight_map[name] = file.get<std::string>();
      bool listed = false;
      for (const auto& f : c.files) listed = listed || f == file.get<std::string>();
      if (!listed) c.files.push_back(file.get<std::string>());
    }
  } else if (::lstat((dir + "/" + kSingleFile).c_str(), &st) == 0) {
    c.files.push_back(kSingleFile);
  } else {
    fail(dir, std::string("holds neither ") + kSingleFile + " nor " + kIndexFile);
  }
  for (const auto& file : c.files) read_header(dir, file, c.tensors);
  // The index and the headers must agree: a tensor the index places in a file that lacks it.
  for (const auto& [name, file] : weight_map) {
    const StoredTensor* t = c.find(name);
    if (!t || t->file != file) fail(dir + "/" + file, "lacks tensor '" + name + "' that " + kIndexFile + " places there");
  }
  return c;
}

std::vector<std::string> check_folder(const FolderContents& contents, const Family& family) {
  std::vector<std::string> problems;
  std::set<std::string> expected;
  for (const auto& m : family.tensors) {
    expected.insert(m.hf_name);
    const StoredTensor* t = contents.find(m.hf_name);
    if (!t) {
      problems.push_back("missing tensor '" + m.hf_name + "' (" + shape_text(m.stored_shape()) + ") in " +
                         (contents.files.size() == 1 ? contents.files[0] : std::string("every file")));
      continue;
    }
    if (t->shape != m.stored_shape())
      problems.push_back("tensor '" + t->name + "' in " + t->file + " has shape " + shape_text(t->shape) +
                         ", config.json makes it " + shape_text(m.stored_shape()));
    if (t->dtype != "F32" && t->dtype != "BF16" && t->dtype != "F16")
      problems.push_back("tensor '" + t->name + "' in " + t->file + " is stored as " + t->dtype +
                         " (F32, BF16 or F16 are read)");
  }
  for (const auto& t : contents.tensors)
    if (!expected.count(t.name) && !family.ignorable(t.name))
      problems.push_back("extra tensor '" + t.name + "' in " + t.file + ": " + family.architecture + " has no such weight");
  return problems;
}

}  // namespace accel::hf
