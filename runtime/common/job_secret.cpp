// The job secret; see job_secret.hpp.
#include "runtime/common/job_secret.hpp"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "runtime/common/errors.hpp"

namespace accel::secret {
namespace {

constexpr size_t kMaxSecretFileBytes = 4096;  // a secret file is a key, not a document
constexpr unsigned kSeals = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;

std::string hex(const unsigned char* bytes, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  return out;
}

// The whole of a small file or memfd, read with pread from offset 0; false on a read error.
bool read_whole(int fd, size_t size, std::string& out) {
  out.assign(size, '\0');
  size_t got = 0;
  while (got < size) {
    ssize_t n = pread(fd, out.data() + got, size - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

// Whether `fd` carries every seal to_memfd() adds (F_GET_SEALS fails, -1, on anything but a memfd).
bool has_seals(int fd) {
  const int seals = fcntl(fd, F_GET_SEALS);
  return seals >= 0 && (static_cast<unsigned>(seals) & kSeals) == kSeals;
}

}  // namespace

void random_bytes(void* out, size_t n) {
  auto* p = static_cast<unsigned char*>(out);
  while (n > 0) {
    ssize_t got = getrandom(p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw std::runtime_error(std::string("getrandom() failed: ") + std::strerror(errno));
    p += got;
    n -= static_cast<size_t>(got);
  }
}

std::string random_hex(size_t n) {
  std::string bytes(n, '\0');
  random_bytes(bytes.data(), n);
  return hex(reinterpret_cast<const unsigned char*>(bytes.data()), n);
}

JobSecret JobSecret::generate() {
  std::string key(kSecretBytes, '\0');
  random_bytes(key.data(), key.size());
  return JobSecret(std::move(key));
}

JobSecret JobSecret::from_file(const std::string& path) {
  const std::string where = std::string(kSecretFileVariable) + "=" + path;
  const std::string fix =
      "\n  fix: create it on a file system every machine of the job reads, as the user who runs the job:\n"
      "    (umask 077; head -c 32 /dev/urandom > FILE)   # or (umask 077; openssl rand 32 > FILE); mode 0600, "
      "32..4096 bytes, see SECURITY.md";
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    throw UsageError(where + ": cannot open the job secret file: " + std::strerror(err) +
                     (err == ELOOP ? " (it is a symbolic link: accel never follows a link to a secret)" : "") + fix);
  }
  struct stat st {};
  std::string problem;
  if (fstat(fd, &st) != 0) problem = std::string("fstat() failed: ") + std::strerror(errno);
  else if (!S_ISREG(st.st_mode)) problem = "it is not a regular file";
  else if (st.st_uid != geteuid())
    problem = "it belongs to uid " + std::to_string(st.st_uid) + ", not to this user (uid " +
              std::to_string(geteuid()) + ")";
  else if ((st.st_mode & 07777 & ~0600u) != 0) {  // owner read/write at most: a key, not a program
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    problem = std::string("its mode is ") + mode + ", wider than 0600" +
              ((st.st_mode & 077) != 0 ? ": group or others may read or change it" : "") + " (chmod 600 it)";
  } else if (st.st_size < static_cast<off_t>(kSecretBytes))
    problem = "it holds " + std::to_string(st.st_size) + " bytes; a secret needs at least " +
              std::to_string(kSecretBytes) + " (256 bits)";
  else if (st.st_size > static_cast<off_t>(kMaxSecretFileBytes))
    problem = "it holds " + std::to_string(st.st_size) + " bytes; a secret file holds at most " +
              std::to_string(kMaxSecretFileBytes);
  std::string key;
  if (problem.empty() && !read_whole(fd, static_cast<size_t>(st.st_size), key))
    problem = std::string("reading it failed: ") + std::strerror(errno);
  close(fd);
  if (!problem.empty()) throw UsageError(where + ": the job secret file is refused: " + problem + fix);
  return JobSecret(std::move(key));
}

JobSecret JobSecret::from_fd(int fd) {
  struct stat st {};
  std::string key;
  const bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
                  has_seals(fd) && st.st_size >= static_cast<off_t>(kSecretBytes) &&
                  st.st_size <= static_cast<off_t>(kMaxSecretFileBytes) &&
                  read_whole(fd, static_cast<size_t>(st.st_size), key);
  close(fd);
  if (!ok)
    throw RunError(std::string(kSecretFdVariable) + "=" + std::to_string(fd) +
                   " is not the launcher's sealed secret; workers are started by `accel launch`, which sets it");
  return JobSecret(std::move(key));
}

int JobSecret::to_memfd() const {
  const int fd = memfd_create("accel-job-secret", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) throw std::runtime_error(std::string("memfd_create() failed: ") + std::strerror(errno));
  size_t put = 0;
  while (put < key_.size()) {
    ssize_t n = write(fd, key_.data() + put, key_.size() - put);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      close(fd);
      throw std::runtime_error(std::string("writing the job secret's memfd failed: ") + std::strerror(err));
    }
    put += static_cast<size_t>(n);
  }
  if (fcntl(fd, F_ADD_SEALS, kSeals) != 0) {
    const int err = errno;
    close(fd);
    throw std::runtime_error(std::string("sealing the job secret's memfd failed: ") + std::strerror(err));
  }
  return fd;
}

std::string JobSecret::mac(std::string_view message) const {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  static const unsigned char kEmpty = 0;  // HMAC() wants a non-null key even when it is empty
  const void* key = key_.empty() ? static_cast<const void*>(&kEmpty) : key_.data();
  if (!HMAC(EVP_sha256(), key, static_cast<int>(key_.size()), reinterpret_cast<const unsigned char*>(message.data()),
            message.size(), out, &len))
    throw std::runtime_error("HMAC-SHA256 failed (OpenSSL libcrypto)");
  return hex(out, len);
}

bool JobSecret::verify(std::string_view message, std::string_view mac_hex) const {
  const std::string expected = mac(message);
  return mac_hex.size() == expected.size() && CRYPTO_memcmp(expected.data(), mac_hex.data(), expected.size()) == 0;
}

const JobSecret& worker_secret() {
  static std::once_flag once;
  static JobSecret secret;
  std::call_once(once, [] {
    const char* fd_text = std::getenv(kSecretFdVariable);
    if (!fd_text || !*fd_text) return;
    char* end = nullptr;
    const long fd = std::strtol(fd_text, &end, 10);
    if (*end != '\0' || fd < 3 || fd > 65535)
      throw RunError(std::string(kSecretFdVariable) + "=" + fd_text + " is not a descriptor number");
    secret = JobSecret::from_fd(static_cast<int>(fd));
    // The descriptor is closed now: a process this one starts must not read a stale number (its
    // own launcher, if any, hands it a secret of its own).
    unsetenv(kSecretFdVariable);
  });
  return secret;
}

std::string printable(std::string_view text) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += digits[c >> 4];
      out += digits[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace accel::secret
