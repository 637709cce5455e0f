// The token cache: see token_cache.hpp.
#include "trainer/text/token_cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "runtime/common/errors.hpp"
#include "runtime/common/safe_file.hpp"
#include "trainer/data/data_error.hpp"
#include "trainer/text/special_tokens.hpp"
#include "trainer/text/tokenizer.hpp"

namespace accel::text {

namespace {

constexpr int kCacheVersion = 1;  // bump when the stream a given input produces changes
// llm.c's token files (trainer/data/token_file.hpp): uint16 (GPT-2's), or uint32 (its llama-3 variant).
constexpr int32_t kMagic16 = 20240520, kVersion16 = 1, kMagic32 = 20240801, kVersion32 = 7;
constexpr size_t kHeaderBytes = 1024;

std::string hex(uint64_t v, int digits) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

[[noreturn]] void fail(const std::string& path, const std::string& what, int err) {
  throw train::DataError("'" + path + "': " + what + ": " + std::strerror(err));
}

// A whole file mapped read-only, never through a link.
class Mapped {
 public:
  explicit Mapped(const std::string& path) : path_(path) {
    const int fd = files::open_nofollow(path, O_RDONLY);
    if (fd < 0) throw train::DataError("data file " + files::open_error(path, errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw train::DataError("data file '" + path + "': not a regular file");
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        fail(path, "cannot map it", err);
      }
      bytes_ = static_cast<const char*>(p);
      ::madvise(p, size_, MADV_SEQUENTIAL);
    }
    ::close(fd);
  }
  ~Mapped() {
    if (bytes_) ::munmap(const_cast<char*>(bytes_), size_);
  }
  std::string_view view() const { return {bytes_, size_}; }

 private:
  std::string path_;
  const char* bytes_ = nullptr;
  size_t size_ = 0;
};

// The number of tokens of a finished cache file, or -1 when it is missing or not a whole token file.
int64_t finished_tokens(const std::string& path) {
  const int fd = files::open_nofollow(path, O_RDONLY);
  if (fd < 0) return -1;
  int32_t header[3] = {};
  struct stat st {};
  const bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::pread(fd, header, sizeof header, 0) == sizeof header;
  ::close(fd);
  const bool narrow = header[0] == kMagic16 && header[1] == kVersion16;
  const bool wide = header[0] == kMagic32 && header[1] == kVersion32;
  if (!ok || !(narrow || wide) || header[2] < 0) return -1;
  const int64_t token_bytes = wide ? 4 : 2;
  if (static_cast<int64_t>(st.st_size) != static_cast<int64_t>(kHeaderBytes) + token_bytes * int64_t{header[2]}) return -1;
  return header[2];
}

// Holds an exclusive flock on `path` (created if missing) for its lifetime.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = files::open_nofollow(path, O_RDWR | O_CREAT, 0644);
    if (fd_ < 0) throw train::DataError("token cache lock " + files::open_error(path, errno));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd_);
      fail(path, "cannot lock it", err);
    }
  }
  ~FileLock() { ::close(fd_); }  // closing releases the lock

 private:
  int fd_ = -1;
};

// Appends tokens to the staged file in blocks; the header's count is written last.
class TokenWriter {
 public:
  TokenWriter(const std::string& path, bool wide) : path_(path), fd_(files::create_fresh(path)), wide_(wide) {
    const std::vector<char> zeros(kHeaderBytes, 0);
    files::write_all(fd_, std::string_view(zeros.data(), zeros.size()), path_);
    buffer_.reserve(kBlock);
  }
  ~TokenWriter() {
    if (fd_ >= 0) ::close(fd_);
  }
  void add(uint32_t id) {
    buffer_.push_back(id);
    if (buffer_.size() == kBlock) flush();
  }
  int64_t count() const { return written_ + static_cast<int64_t>(buffer_.size()); }
  void finish() {
    flush();
    if (written_ > INT32_MAX)
      throw train::DataError("'" + path_ + "': " + std::to_string(written_) + " tokens, more than an llm.c token "
                             "file's int32 count holds; split the data into several files");
    const int32_t header[3] = {wide_ ? kMagic32 : kMagic16, wide_ ? kVersion32 : kVersion16, static_cast<int32_t>(written_)};
    if (::pwrite(fd_, header, sizeof header, 0) != sizeof header) fail(path_, "cannot write its header", errno);
    if (::fsync(fd_) != 0) fail(path_, "cannot sync it", errno);
    if (::close(fd_) != 0) fail(path_, "cannot close it", errno);
    fd_ = -1;
  }

 private:
  static constexpr size_t kBlock = size_t{1} << 20;
  void flush() {
    if (wide_) {
      files::write_all(fd_, std::string_view(reinterpret_cast<const char*>(buffer_.data()), buffer_.size() * 4), path_);
    } else {
      narrow_.assign(buffer_.begin(), buffer_.end());  // ids below 65536: checked by the caller
      files::write_all(fd_, std::string_view(reinterpret_cast<const char*>(narrow_.data()), narrow_.size() * 2), path_);
    }
    written_ += static_cast<int64_t>(buffer_.size());
    buffer_.clear();
  }
  std::string path_;
  int fd_;
  bool wide_;
  std::vector<uint32_t> buffer_;
  std::vector<uint16_t> narrow_;
  int64_t written_ = 0;
};

std::string read_small_file(const std::string& path) {
  const int fd = files::open_nofollow(path, O_RDONLY);
  if (fd < 0) throw train::DataError("tokenizer " + files::open_error(path, errno));
  std::string text;
  char buf[1 << 16];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail(path, "cannot read it", err);
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace

uint64_t fnv1a64_bytes(const void* data, size_t size, uint64_t h) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

std::string default_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::string(xdg) + "/accel/tokens";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/accel/tokens";
}

TokenCache ensure_token_cache(const TokenCacheRequest& request) {
  const std::string tokenizer_text = read_small_file(request.tokenizer_path);
  TokenizerSpec spec = parse_tokenizer_json(tokenizer_text, request.tokenizer_path);
  const DocumentBoundaries bounds = resolve_boundaries(spec, request.bos, request.eos);
  TokenCache cache;
  cache.id_limit = spec.id_limit();

  const Mapped data(request.data_path);
  const std::string settings = std::string(request.format == DocumentFormat::jsonl ? "jsonl:" + request.field : "text") +
                               " bos=" + (bounds.bos ? std::to_string(*bounds.bos) : "none") +
                               " eos=" + (bounds.eos ? std::to_string(*bounds.eos) : "none") +
                               " v" + std::to_string(kCacheVersion);
  const std::string dir = request.cache_dir.empty() ? default_cache_dir() : request.cache_dir;
  const std::string name = "tokens-" + hex(fnv1a64_bytes(data.view().data(), data.view().size()), 16) + "-" +
                           hex(fnv1a64_bytes(tokenizer_text.data(), tokenizer_text.size()), 16) + "-" +
                           hex(fnv1a64_bytes(settings.data(), settings.size()) >> 32, 8);
  cache.path = dir + "/" + name + ".bin";
  cache.documents = -1;
  if ((cache.tokens = finished_tokens(cache.path)) >= 0) return cache;

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw train::DataError("data.cache_dir '" + dir + "': cannot create it: " + ec.message());
  const FileLock lock(cache.path + ".lock");
  if ((cache.tokens = finished_tokens(cache.path)) >= 0) return cache;  // built while we waited

  Tokenizer tokenizer(std::move(spec));
  const std::string staged = cache.path + ".tmp." + std::to_string(::getpid());
  {
    TokenWriter writer(staged, cache.id_limit > 65536);
    std::vector<uint32_t> ids;
    try {
      cache.documents = for_each_document(data.view(), request.format, request.field, request.data_path,
                                          [&](std::string_view doc) {
                                            ids.clear();
                                            tokenizer.encode(doc, ids);
                                            if (bounds.bos) writer.add(*bounds.bos);
                                            for (uint32_t id : ids) writer.add(id);
                                            if (bounds.eos) writer.add(*bounds.eos);
                                          });
      writer.finish();
    } catch (...) {
      std::remove(staged.c_str());
      throw;
    }
    cache.tokens = writer.count();
  }
  nlohmann::json about = {{"data", request.data_path},         {"tokenizer", request.tokenizer_path},
                          {"settings", settings},               {"documents", cache.documents},
                          {"tokens", cache.tokens},             {"id_limit", cache.id_limit}};
  files::write_file_replacing(cache.path.substr(0, cache.path.size() - 4) + ".json", about.dump(2) + "\n");
  if (std::rename(staged.c_str(), cache.path.c_str()) != 0) {
    const int err = errno;
    std::remove(staged.c_str());
    fail(cache.path, "cannot rename the staged file into place", err);
  }
  cache.built = true;
  return cache;
}

TokenCacheRequest token_cache_request(const config::DataSection& data) {
  TokenCacheRequest request;
  request.data_path = data.path;
  request.format = data.format == config::DataFormat::jsonl ? DocumentFormat::jsonl : DocumentFormat::text;
  request.field = data.field;
  request.tokenizer_path = data.tokenizer;
  request.bos = data.bos;
  request.eos = data.eos;
  request.cache_dir = data.cache_dir;
  return request;
}

}  // namespace accel::text
