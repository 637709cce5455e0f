// The mutual challenge-response that opens every connection to an elastic job's membership listener
// (elastic_host.hpp, docs/design/0033), before the host reads any message of the connection:
//   host -> launcher:  hello <Nh>                     Nh: 32 fresh random bytes, hex
//   launcher -> host:  proof <Nl> <HMAC(k, "accel-membership launcher" Nh Nl)>
//   host -> launcher:  proof <HMAC(k, "accel-membership host" Nh Nl)>
// k is the job secret (HMAC-SHA256, job_secret.hpp); the fields are tab-separated lines like the
// messages that follow (elastic_messages.hpp). Each side proves it holds k over a nonce the other
// chose fresh, so a recorded exchange cannot be replayed, and the two proofs differ by role, so one
// cannot be reflected as the other.
// Invariants: every parse refuses a line it cannot read whole; proofs compare in constant time.
#pragma once

#include <optional>
#include <string>

#include "runtime/common/job_secret.hpp"

namespace accel::launch {

inline constexpr size_t kNonceBytes = 32;
// Longest handshake line either side accepts (the launcher's proof is about 140 bytes).
inline constexpr size_t kMaxHandshakeLine = 512;

std::string fresh_nonce();  // kNonceBytes from getrandom, as hex

std::string hello_line(const std::string& host_nonce);  // with its '\n'
// The host's nonce of a hello line (without its '\n'); nullopt for anything else.
std::optional<std::string> parse_hello(const std::string& line);

std::string launcher_proof_line(const secret::JobSecret& secret, const std::string& host_nonce,
                                const std::string& launcher_nonce);
// The launcher's nonce when `line` proves the secret for `host_nonce`; nullopt otherwise.
std::optional<std::string> check_launcher_proof(const secret::JobSecret& secret, const std::string& host_nonce,
                                                const std::string& line);

std::string host_proof_line(const secret::JobSecret& secret, const std::string& host_nonce,
                            const std::string& launcher_nonce);
bool check_host_proof(const secret::JobSecret& secret, const std::string& host_nonce, const std::string& launcher_nonce,
                      const std::string& line);

}  // namespace accel::launch
