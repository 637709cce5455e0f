// The job secret (docs/design/0033, SECURITY.md): the key that lets a job's own processes tell each
// other from anyone else who can reach the job's sockets or its rendezvous store.
// Where it comes from: the launcher of a one-machine job draws 32 bytes from getrandom(2); every
// launcher of a multi-launcher job (several machines, or srun/mpirun tasks) reads the same file
// named by ACCEL_SECRET_FILE (a regular file of this user, mode 0600 or stricter, 32..4096 bytes,
// never a link); without it such a job is refused unless it sets allow_unauthenticated.
// Launchers hand it to their workers as an inherited, sealed memfd named by
// ACCEL_SECRET_FD: never in argv, the environment's values, the store or a file others can read,
// and never logged.
// What it is used for: HMAC-SHA256 (OpenSSL's libcrypto) over the values accel reads back from the
// unauthenticated c10d store, and the mutual challenge-response of the elastic membership listener.
// Invariants: an absent secret (a multi-launcher job with allow_unauthenticated, a worker started by
// hand) MACs under an empty key, so the code paths are the same and nothing is authenticated; MACs
// are compared in constant time.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace accel::secret {

inline constexpr const char* kSecretFdVariable = "ACCEL_SECRET_FD";
inline constexpr const char* kSecretFileVariable = "ACCEL_SECRET_FILE";
inline constexpr size_t kSecretBytes = 32;  // 256 bits

// Fills `out` with `n` bytes from getrandom(2) (the kernel's CSPRNG). Throws std::runtime_error
// when the kernel refuses.
void random_bytes(void* out, size_t n);
// `n` random bytes as 2n lowercase hex digits.
std::string random_hex(size_t n);

class JobSecret {
 public:
  JobSecret() = default;  // absent

  static JobSecret generate();
  // Reads the secret file; throws UsageError (exit 2) naming `path` when it is a link, not a regular
  // file, not this user's, of a mode wider than 0600, shorter than kSecretBytes or over 4096 bytes.
  static JobSecret from_file(const std::string& path);
  // A worker's copy, read from the launcher's memfd `fd` (which it closes). Throws RunError when
  // `fd` is not a sealed memfd of this user.
  static JobSecret from_fd(int fd);

  bool present() const { return !key_.empty(); }
  // A sealed (no write, grow or shrink) memfd holding the secret, close-on-exec: the caller clears
  // FD_CLOEXEC in the child it hands it to. Throws std::runtime_error.
  int to_memfd() const;

  // HMAC-SHA256 of `message` under the secret, as 64 hex digits.
  std::string mac(std::string_view message) const;
  // Whether `mac_hex` is mac(message), compared in constant time.
  bool verify(std::string_view message, std::string_view mac_hex) const;

 private:
  explicit JobSecret(std::string key) : key_(std::move(key)) {}
  std::string key_;
};

// The secret of this worker process: read once from ACCEL_SECRET_FD on first use (absent when the
// variable is not set). Call it first before starting threads (Rendezvous does).
const JobSecret& worker_secret();

// `text` with every control byte (and DEL) written as \xNN, for printing what a peer sent.
std::string printable(std::string_view text);

}  // namespace accel::secret
