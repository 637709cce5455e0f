// llm.c token files: see token_file.hpp.
#include "trainer/data/token_file.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include "runtime/common/errors.hpp"
#include "runtime/common/safe_file.hpp"
#include "trainer/data/data_error.hpp"

namespace accel::train {

namespace {

std::string where(const std::string& path) { return "data file '" + path + "'"; }

}  // namespace

TokenStore read_token_file(const std::string& path, int64_t vocab_size) {
  auto file = std::make_shared<const MappedFile>(path);
  const size_t size = file->size();
  if (size < kTokenFileHeaderBytes)
    throw DataError(where(path) + ": " + std::to_string(size) + " bytes, too short for an llm.c token file (its "
                    "header alone is 1024 bytes): the file is truncated or not a token file (for plain text "
                    "use data.kind: text)");
  int32_t header[kTokenFileHeaderInts];
  std::memcpy(header, file->bytes(), kTokenFileHeaderBytes);
  const bool wide = header[0] == kLlama3TokenFileMagic;
  if (!wide && header[0] != kTokenFileMagic)
    throw DataError(where(path) + ": bad magic number " + std::to_string(header[0]) + " (expected " +
                    std::to_string(kTokenFileMagic) + ", or " + std::to_string(kLlama3TokenFileMagic) +
                    " for uint32 tokens): not an llm.c token file (for plain text use data.kind: text)");
  const int32_t version = wide ? kLlama3TokenFileVersion : kTokenFileVersion;
  if (header[1] != version)
    throw DataError(where(path) + ": unsupported token file version " + std::to_string(header[1]) +
                    " (expected " + std::to_string(version) + (wide ? " for an llm.c llama-3 file, magic 20240801)" : ")"));
  const int token_bytes = wide ? 4 : 2;
  const int64_t declared = header[2];
  if (declared <= 0)
    throw DataError(where(path) + ": the header declares " + std::to_string(declared) +
                    " tokens; a token file needs at least one");
  const int64_t payload = static_cast<int64_t>(size - kTokenFileHeaderBytes);
  const int64_t expected = declared * token_bytes;
  if (payload < expected)
    throw DataError(where(path) + ": truncated: the header declares " + std::to_string(declared) + " tokens (" +
                    std::to_string(expected) + " bytes) but only " + std::to_string(payload) +
                    " bytes follow it; regenerate or re-copy the file");
  if (payload != expected)
    throw DataError(where(path) + ": token count mismatch: the header declares " + std::to_string(declared) +
                    " tokens (" + std::to_string(expected) + " bytes) but " + std::to_string(payload) +
                    " bytes follow it; the header or the file is wrong, regenerate the file");
  TokenStore tokens = TokenStore::mapped(file, kTokenFileHeaderBytes, declared, token_bytes);
  if (vocab_size > 0) check_vocabulary(tokens, vocab_size, where(path));
  return tokens;
}

void write_token_file(const std::string& path, const std::vector<uint16_t>& tokens) {
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw DataError(where(path) + ": cannot write " + std::to_string(tokens.size()) +
                    " tokens: the header's int32 count holds at most 2^31 - 1");
  int32_t header[kTokenFileHeaderInts] = {};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = static_cast<int32_t>(tokens.size());

  // Staged beside, created afresh and never through a link (runtime/common/safe_file.hpp).
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = -1;
  try {
    fd = files::create_fresh(tmp);
  } catch (const RunError& e) {
    throw DataError(where(tmp) + ": cannot create it: " + e.what());
  }
  FILE* f = ::fdopen(fd, "wb");
  if (!f) {
    const int err = errno;
    ::close(fd);
    std::remove(tmp.c_str());
    throw DataError(where(tmp) + ": cannot create it: " + std::strerror(err));
  }
  bool ok = std::fwrite(header, sizeof header, 1, f) == 1;
  if (ok && !tokens.empty()) ok = std::fwrite(tokens.data(), sizeof(uint16_t), tokens.size(), f) == tokens.size();
  ok = (std::fflush(f) == 0) && ok;
  ok = (::fsync(::fileno(f)) == 0) && ok;
  const int err = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = ok ? errno : err;
    std::remove(tmp.c_str());
    throw DataError(where(path) + ": cannot write it: " + std::strerror(e));
  }
}

}  // namespace accel::train
