// The checkpoint store: layout, atomic commit, `latest`, manifest and verification (see the header).
#include "runtime/checkpoint/checkpoint_store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <utility>

#include "runtime/common/errors.hpp"
#include "runtime/common/safe_file.hpp"

namespace accel::checkpoint {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;
constexpr size_t kChunk = size_t{1} << 20;  // 1 MiB: bounded memory for multi-GiB model files
constexpr const char* kTmpPrefix = ".tmp.";
constexpr const char* kManifestTmpName = "manifest.json.tmp";
constexpr const char* kLatestTmpName = "latest.tmp";

[[noreturn]] void fail(const std::string& message) { throw CheckpointError(message); }

std::string errno_text(int err) { return std::strerror(err); }

// What the user can do about a damaged or incomplete checkpoint directory.
std::string damaged_hint(const std::string& dir) {
  return "delete " + dir + " or set training.resume to another checkpoint directory";
}

std::string latest_hint(const std::string& latest) {
  return "write the name of an existing step_N directory into " + latest +
         ", delete it to start without a checkpoint, or set training.resume to a checkpoint directory";
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

std::optional<uint64_t> parse_hex64(const std::string& s) {
  if (s.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return std::nullopt;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

// Printable excerpt of arbitrary file content, for messages about a garbage `latest`.
std::string excerpt(const std::string& text) {
  std::string out;
  for (char c : text.substr(0, 40)) out += (c >= 32 && c < 127) ? c : '?';
  if (text.size() > 40) out += "...";
  return out;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// fsync a directory so that renames and creations inside it survive a crash. EINVAL means the
// file system does not support syncing directories (some network file systems): nothing to do.
void fsync_dir(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) fail("cannot open directory " + dir + " to sync it: " + errno_text(errno));
  if (::fsync(fd.get()) != 0 && errno != EINVAL) fail("cannot sync directory " + dir + ": " + errno_text(errno));
}

struct Hashed {
  uint64_t bytes = 0;
  uint64_t hash = kFnvOffset;
};

// Size and FNV-1a 64 from one read of the file (so they describe the same bytes); with `sync`
// the file is also fsynced, which covers files other ranks wrote without syncing them.
Hashed hash_file(const std::string& path, bool sync) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail("cannot open " + path + " to hash it: " + errno_text(errno));
  std::vector<unsigned char> buf(kChunk);
  Hashed h;
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot read " + path + ": " + errno_text(errno));
    }
    if (n == 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      h.hash ^= buf[static_cast<size_t>(i)];
      h.hash *= kFnvPrime;
    }
    h.bytes += static_cast<uint64_t>(n);
  }
  if (sync && ::fsync(fd.get()) != 0 && errno != EINVAL) fail("cannot sync " + path + ": " + errno_text(errno));
  return h;
}

std::string read_text(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("cannot open " + path + ": " + errno_text(errno));
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const bool bad = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (bad) fail("cannot read " + path + ": " + errno_text(err));
  return text;
}

fs::file_type type_of(const fs::path& p) {
  std::error_code ec;
  const auto st = fs::symlink_status(p, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) fail("cannot inspect " + p.string() + ": " + ec.message());
  return st.type();  // not_found when missing
}

void remove_all_checked(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) fail("cannot remove " + p.string() + ": " + ec.message());
}

void rename_checked(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) fail("cannot rename " + from.string() + " to " + to.string() + ": " + ec.message());
}

bool valid_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// "step_" followed by at least 8 digits, as step_dir_name writes it.
bool valid_step_name(const std::string& name) {
  if (name.rfind("step_", 0) != 0 || name.size() < 5 + 8 || name.size() > 5 + 19) return false;
  return std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

Json manifest_to_json(const Manifest& m) {
  Json files = Json::array();
  for (const auto& f : m.files) {
    Json entry{{"name", f.name}, {"bytes", f.bytes}, {"fnv1a64", hex64(f.fnv1a64)}};
    if (m.node_local()) entry["machines"] = f.machines;
    files.push_back(std::move(entry));
  }
  Json j{{"format", kManifestFormat}, {"version", m.format_version}, {"step", m.step},
         {"files", std::move(files)}, {"extra", m.extra}};
  if (m.node_local()) j["num_machines"] = m.num_machines;
  return j;
}

// Checks the manifest's shape; every problem names manifest.json and what is wrong with it.
Manifest manifest_from_json(const Json& j, const std::string& path, const std::string& dir) {
  auto bad = [&](const std::string& what) -> void {
    fail(path + " is not a valid checkpoint manifest: " + what + "; " + damaged_hint(dir));
  };
  if (!j.is_object()) bad("expected a JSON object");
  auto require = [&](const char* key) -> const Json& {
    auto it = j.find(key);
    if (it == j.end()) bad(std::string("the key \"") + key + "\" is missing");
    return *it;
  };
  const Json& format = require("format");
  if (!format.is_string() || format.get<std::string>() != kManifestFormat)
    bad(std::string("\"format\" is ") + format.dump() + ", expected \"" + kManifestFormat + "\"");
  const Json& version = require("version");
  if (!version.is_number_integer()) bad("\"version\" is " + version.dump() + ", expected an integer");
  const int64_t v = version.get<int64_t>();
  if (v != kManifestVersion && v != kNodeLocalManifestVersion)
    bad("\"version\" is " + version.dump() + ", this accel reads versions " + std::to_string(kManifestVersion) +
        " and " + std::to_string(kNodeLocalManifestVersion) + " (written by a different accel version?)");
  int num_machines = 1;
  if (v == kNodeLocalManifestVersion) {
    const Json& n = require("num_machines");
    if (!n.is_number_integer() || n.get<int64_t>() < 1 || n.get<int64_t>() > 1 << 20)
      bad("\"num_machines\" is " + n.dump() + ", expected a positive integer");
    num_machines = n.get<int>();
  }
  const Json& step = require("step");
  if (!step.is_number_integer() || step.get<int64_t>() < 0)
    bad("\"step\" is " + step.dump() + ", expected a non-negative integer");
  const Json& files = require("files");
  if (!files.is_array()) bad("\"files\" is not an array");
  const Json& extra = require("extra");
  if (!extra.is_object()) bad("\"extra\" is not an object");

  Manifest m;
  m.format_version = static_cast<int>(v);
  m.num_machines = num_machines;
  m.step = step.get<int64_t>();
  m.extra = extra;
  std::set<std::string> seen;
  for (size_t i = 0; i < files.size(); ++i) {
    const Json& f = files[i];
    const std::string where = "files[" + std::to_string(i) + "]";
    if (!f.is_object()) bad(where + " is not an object");
    auto name = f.find("name");
    auto bytes = f.find("bytes");
    auto hash = f.find("fnv1a64");
    if (name == f.end() || !name->is_string() || !valid_file_name(name->get<std::string>()))
      bad(where + ".name is missing or not a plain file name");
    if (name->get<std::string>() == kManifestName) bad(where + " lists manifest.json itself");
    if (!seen.insert(name->get<std::string>()).second) bad(where + ".name \"" + name->get<std::string>() + "\" is listed twice");
    if (bytes == f.end() || !bytes->is_number_integer() || bytes->get<int64_t>() < 0)
      bad(where + ".bytes is missing or not a non-negative integer");
    std::optional<uint64_t> h;
    if (hash != f.end() && hash->is_string()) h = parse_hex64(hash->get<std::string>());
    if (!h) bad(where + ".fnv1a64 is missing or not 16 hex digits");
    FileEntry entry{name->get<std::string>(), bytes->get<uint64_t>(), *h, {}};
    if (m.node_local()) {
      auto machines = f.find("machines");
      bool ok = machines != f.end() && machines->is_array() && !machines->empty();
      for (size_t k = 0; ok && k < machines->size(); ++k) {
        const Json& mk = (*machines)[k];
        ok = mk.is_number_integer() && mk.get<int64_t>() >= 0 && mk.get<int64_t>() < num_machines &&
             (k == 0 || mk.get<int>() > entry.machines.back());
        if (ok) entry.machines.push_back(mk.get<int>());
      }
      if (!ok) bad(where + ".machines is missing or not a sorted list of machine ranks below num_machines");
    }
    m.files.push_back(std::move(entry));
  }
  return m;
}

}  // namespace

std::string checkpoints_root(const std::string& output_dir) { return (fs::path(output_dir) / "checkpoints").string(); }

std::string step_dir_name(int64_t step) {
  if (step < 0) throw std::invalid_argument("checkpoint step must be non-negative, got " + std::to_string(step));
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08" PRId64, step);
  return buf;
}

uint64_t fnv1a64_file(const std::string& path) { return hash_file(path, false).hash; }

void write_file_synced(const std::string& path, std::string_view contents) {
  // Never through a symbolic link at `path` (a staged name in output_dir another user could plant):
  // that is files::link_refusal's UsageError; other failures stay CheckpointErrors.
  const int fd = files::open_nofollow(path, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK, 0644);
  if (fd < 0) {
    const int err = errno;
    if (files::is_symlink(path)) throw UsageError(files::link_refusal(path));
    fail("cannot create " + path + ": " + errno_text(err));
  }
  // O_NONBLOCK: a FIFO planted at `path` fails the open instead of blocking it (a regular file,
  // or a device such as /dev/full, is unaffected). Every step can report the failure (a full disk
  // often only shows at fsync).
  std::string error;
  for (size_t done = 0; done < contents.size() && error.empty();) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) error = "writing failed: " + errno_text(n < 0 ? errno : EIO);
    else done += size_t(n);
  }
  if (error.empty() && ::fsync(fd) != 0 && errno != EINVAL) error = "syncing to disk failed: " + errno_text(errno);
  const int close_err = ::close(fd) != 0 ? errno : 0;
  if (error.empty() && close_err != 0) error = "closing failed: " + errno_text(close_err);
  if (!error.empty()) fail("cannot write " + path + ": " + error + " (is the disk full?)");
}

std::string begin_checkpoint(const std::string& root, int64_t step) {
  const std::string name = step_dir_name(step);
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) fail("cannot create the checkpoint directory " + root + ": " + ec.message());
  if (type_of(root) != fs::file_type::directory) fail(root + " exists but is not a directory; move it away or change output_dir");

  // Leftovers of crashed writers: tmp checkpoints (any step), replaced step dirs moved aside,
  // and a latest.tmp. Collected first: removing while iterating is unspecified.
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string entry = it->path().filename().string();
    if (entry.rfind(kTmpPrefix, 0) == 0 || entry == kLatestTmpName) stale.push_back(it->path());
  }
  if (ec) fail("cannot list " + root + ": " + ec.message());
  for (const auto& p : stale) remove_all_checked(p);

  const fs::path tmp = fs::path(root) / (kTmpPrefix + name);
  fs::create_directory(tmp, ec);
  if (ec) fail("cannot create " + tmp.string() + ": " + ec.message());
  fsync_dir(root);
  return tmp.string();
}

namespace {

fs::path staging_dir(const std::string& root, int64_t step, const char* what) {
  const fs::path tmp = fs::path(root) / (kTmpPrefix + step_dir_name(step));
  if (type_of(tmp) != fs::file_type::directory)
    fail(std::string("cannot ") + what + " checkpoint step " + std::to_string(step) + ": " + tmp.string() +
         " does not exist (begin_checkpoint was not called, or another writer removed it)");
  return tmp;
}

// Every regular file of the staging directory but the manifest; anything else could not be
// verified later.
std::vector<std::string> staged_names(const fs::path& tmp) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(tmp, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string entry = it->path().filename().string();
    if (entry == kManifestName || entry == kManifestTmpName) continue;  // from an earlier failed commit
    if (type_of(it->path()) != fs::file_type::regular)
      fail("cannot commit " + tmp.string() + ": " + it->path().string() +
           " is not a regular file (checkpoints hold plain files only; subdirectories and links are not verified)");
    names.push_back(entry);
  }
  if (ec) fail("cannot list " + tmp.string() + ": " + ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<FileEntry> hash_names(const fs::path& tmp, const std::vector<std::string>& names) {
  std::vector<FileEntry> files;
  for (const auto& n : names) {
    const Hashed h = hash_file((tmp / n).string(), /*sync=*/true);
    files.push_back(FileEntry{n, h.bytes, h.hash, {}});
  }
  return files;
}

Json checked_extra(const Json& extra) {
  if (!extra.is_null() && !extra.is_object())
    throw std::invalid_argument("commit_checkpoint: extra must be a JSON object, got " + std::string(extra.type_name()));
  return extra.is_null() ? Json::object() : extra;
}

// Writes the manifest into the staging directory, renames it to step_N and moves `latest` to it.
std::string seal(const std::string& root, const fs::path& tmp, const Manifest& m) {
  const std::string name = step_dir_name(m.step);
  const fs::path final_dir = fs::path(root) / name;
  // The manifest last, itself atomically, then the directory entry for it.
  const fs::path manifest_tmp = tmp / kManifestTmpName;
  write_file_synced(manifest_tmp.string(), manifest_to_json(m).dump(2) + "\n");
  rename_checked(manifest_tmp, tmp / kManifestName);
  fsync_dir(tmp.string());

  // A rerun may recommit a step: move the old directory aside (a .tmp.* name, so a crash leaves it
  // for begin_checkpoint to clean) and swap the new one in with two back-to-back renames.
  std::optional<fs::path> aside;
  if (type_of(final_dir) != fs::file_type::not_found) {
    aside = fs::path(root) / (std::string(kTmpPrefix) + "replaced." + name);
    remove_all_checked(*aside);
    rename_checked(final_dir, *aside);
  }
  rename_checked(tmp, final_dir);
  fsync_dir(root);  // step_N is durable before latest can name it

  const fs::path latest_tmp = fs::path(root) / kLatestTmpName;
  write_file_synced(latest_tmp.string(), name + "\n");
  rename_checked(latest_tmp, fs::path(root) / kLatestName);
  fsync_dir(root);

  // The checkpoint is committed; a failure to delete the old copy only leaves garbage that the
  // next begin_checkpoint removes, so it must not make the commit look failed.
  std::error_code ec;
  if (aside) fs::remove_all(*aside, ec);
  return final_dir.string();
}

}  // namespace

std::string commit_checkpoint(const std::string& root, int64_t step, const nlohmann::json& extra) {
  Json checked = checked_extra(extra);
  const fs::path tmp = staging_dir(root, step, "commit");
  Manifest m;
  m.step = step;
  m.extra = std::move(checked);
  m.files = hash_names(tmp, staged_names(tmp));
  return seal(root, tmp, m);
}

std::vector<FileEntry> hash_staged_files(const std::string& root, int64_t step) {
  const fs::path tmp = staging_dir(root, step, "hash");
  return hash_names(tmp, staged_names(tmp));
}

std::string commit_node_local(const std::string& root, int64_t step, const nlohmann::json& extra,
                              const std::vector<FileEntry>& files, int num_machines) {
  Json checked = checked_extra(extra);
  const fs::path tmp = staging_dir(root, step, "commit");
  std::set<std::string> listed;
  for (const auto& f : files) listed.insert(f.name);
  for (const auto& n : staged_names(tmp))
    if (!listed.count(n))
      fail("cannot commit " + tmp.string() + ": " + n + " was staged here but is not in the machines' file list");
  Manifest m;
  m.format_version = kNodeLocalManifestVersion;
  m.num_machines = num_machines;
  m.step = step;
  m.extra = std::move(checked);
  m.files = files;
  std::sort(m.files.begin(), m.files.end(), [](const FileEntry& a, const FileEntry& b) { return a.name < b.name; });
  return seal(root, tmp, m);
}

std::vector<FileEntry> hash_files(const std::string& dir, const std::vector<std::string>& names) {
  return hash_names(fs::path(dir), names);
}

std::string commit_listed(const std::string& root, int64_t step, const nlohmann::json& extra,
                          const std::vector<FileEntry>& files) {
  Json checked = checked_extra(extra);
  const fs::path tmp = staging_dir(root, step, "commit");
  std::set<std::string> listed;
  for (const auto& f : files) {
    if (!listed.insert(f.name).second) fail("cannot commit " + tmp.string() + ": " + f.name + " is listed twice");
    std::error_code ec;
    const uint64_t size = fs::file_size(tmp / f.name, ec);
    if (ec) fail("cannot commit " + tmp.string() + ": " + f.name + " was listed but cannot be read: " + ec.message());
    if (size != f.bytes)
      fail("cannot commit " + tmp.string() + ": " + f.name + " has " + std::to_string(size) + " bytes, its writer "
           "listed " + std::to_string(f.bytes) + " (changed after it was hashed)");
  }
  for (const auto& n : staged_names(tmp))
    if (!listed.count(n))
      fail("cannot commit " + tmp.string() + ": " + n + " was staged here but no rank listed it");
  Manifest m;
  m.step = step;
  m.extra = std::move(checked);
  m.files = files;
  std::sort(m.files.begin(), m.files.end(), [](const FileEntry& a, const FileEntry& b) { return a.name < b.name; });
  return seal(root, tmp, m);
}

std::optional<std::string> find_latest_checkpoint(const std::string& root) {
  const auto root_type = type_of(root);
  if (root_type == fs::file_type::not_found) return std::nullopt;
  if (root_type != fs::file_type::directory) fail(root + " is not a directory; move it away or change output_dir");
  const fs::path latest = fs::path(root) / kLatestName;
  const auto latest_type = type_of(latest);
  if (latest_type == fs::file_type::not_found) return std::nullopt;
  if (latest_type != fs::file_type::regular) fail(latest.string() + " is not a regular file; " + latest_hint(latest.string()));

  std::string text = read_text(latest.string());
  std::string name = text;
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
  if (name.empty()) fail(latest.string() + " is empty; " + latest_hint(latest.string()));
  if (!valid_step_name(name))
    fail(latest.string() + " is malformed: it holds \"" + excerpt(text) +
         "\", expected one line naming a step directory like \"step_00000020\"; " + latest_hint(latest.string()));
  const fs::path dir = fs::path(root) / name;
  if (type_of(dir) != fs::file_type::directory)
    fail(latest.string() + " names " + name + " but " + dir.string() + " does not exist; " + latest_hint(latest.string()));
  return dir.string();
}

Manifest read_manifest(const std::string& dir) {
  const auto dir_type = type_of(dir);
  if (dir_type == fs::file_type::not_found)
    fail("checkpoint directory " + dir + " does not exist; set training.resume to an existing checkpoint directory");
  if (dir_type != fs::file_type::directory)
    fail(dir + " is not a checkpoint directory (not a directory); set training.resume to a checkpoint directory");
  const std::string path = (fs::path(dir) / kManifestName).string();
  if (type_of(path) == fs::file_type::not_found)
    fail(dir + " is not a complete checkpoint: " + path +
         " is missing (its writer stopped before committing, or this is not a checkpoint directory); " +
         damaged_hint(dir));
  const std::string text = read_text(path);
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::parse_error& e) {
    fail(path + " is not valid JSON (" + e.what() + "); " + damaged_hint(dir));
  }
  return manifest_from_json(j, path, dir);
}

Manifest verify_checkpoint(const std::string& dir, int machine) {
  Manifest m = read_manifest(dir);
  std::string problems;
  std::string node_local_missing;  // files this machine's number held when written, absent here
  for (const auto& f : m.files) {
    const std::string path = (fs::path(dir) / f.name).string();
    const auto t = type_of(path);
    if (t == fs::file_type::not_found) {
      const bool everywhere = f.machines.empty() || int(f.machines.size()) == m.num_machines;
      const bool held_here = f.machines.empty() || machine < 0
                                 ? everywhere
                                 : std::find(f.machines.begin(), f.machines.end(), machine) != f.machines.end();
      if (held_here && !everywhere)
        node_local_missing += "\n  " + path + " is missing (the manifest says machine " + std::to_string(machine) +
                              "'s storage held it)";
      else if (held_here)
        problems += "\n  " + path + " is missing (the manifest lists it)";
      else
        m.elsewhere.push_back(f);  // node-local: on another machine's storage
      continue;
    }
    if (t != fs::file_type::regular) {
      problems += "\n  " + path + " is not a regular file";
      continue;
    }
    // Size first (cheap, and the common case for an interrupted copy), hash only when it matches.
    std::error_code ec;
    const uint64_t size = fs::file_size(path, ec);
    if (ec) fail("cannot read the size of " + path + ": " + ec.message());
    if (size != f.bytes) {
      problems += "\n  " + path + (size < f.bytes ? " is truncated: " : " is larger than the manifest records: ") +
                  std::to_string(size) + " bytes, the manifest records " + std::to_string(f.bytes);
      continue;
    }
    const Hashed h = hash_file(path, false);
    if (h.bytes != f.bytes)  // changed while we read it
      problems += "\n  " + path + " changed size while being verified: read " + std::to_string(h.bytes) +
                  " bytes, the manifest records " + std::to_string(f.bytes);
    else if (h.hash != f.fnv1a64)
      problems += "\n  " + path + " is corrupted: its FNV-1a 64 hash is 0x" + hex64(h.hash) +
                  " but the manifest records 0x" + hex64(f.fnv1a64);
  }
  if (!problems.empty())
    fail("checkpoint " + dir + " is damaged:" + problems + node_local_missing + "\n" + damaged_hint(dir) +
         " (a damaged checkpoint is never skipped silently)");
  // Node-local files are where the machine that wrote them kept them. Machine numbers can change
  // between rounds (an elastic restart that elected another host renumbers the machines), so a
  // missing one is more likely on another disk than lost: say both, advise no deletion first.
  if (!node_local_missing.empty())
    fail("checkpoint " + dir + " is node-local and files this machine (" + std::to_string(machine) +
         ") should hold are not on its storage:" + node_local_missing +
         "\nIf the machines were numbered otherwise when it was written (an elastic restart that elected "
         "another rendezvous host, or machines started in another order), those files are on another "
         "machine's disk: put training.output_dir on storage every machine shares, or copy every machine's " +
         fs::path(dir).filename().string() + " directory into one (rsync -a) and resume from it. If this "
         "machine's storage lost them, " + damaged_hint(dir) + ".");
  return m;
}

}  // namespace accel::checkpoint
