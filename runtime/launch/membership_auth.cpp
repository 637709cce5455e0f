// The membership listener's challenge-response; see membership_auth.hpp.
#include "runtime/launch/membership_auth.hpp"

#include <vector>

namespace accel::launch {
namespace {

std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t tab = line.find('\t', start);
    out.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) return out;
    start = tab + 1;
  }
}

bool is_nonce(const std::string& text) {
  if (text.size() != 2 * kNonceBytes) return false;
  for (char c : text)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string transcript(const char* role, const std::string& host_nonce, const std::string& launcher_nonce) {
  return std::string("accel-membership ") + role + "\n" + host_nonce + "\n" + launcher_nonce;
}

}  // namespace

std::string fresh_nonce() { return secret::random_hex(kNonceBytes); }

std::string hello_line(const std::string& host_nonce) { return "hello\t" + host_nonce + "\n"; }

std::optional<std::string> parse_hello(const std::string& line) {
  const auto f = fields(line);
  if (f.size() != 2 || f[0] != "hello" || !is_nonce(f[1])) return std::nullopt;
  return f[1];
}

std::string launcher_proof_line(const secret::JobSecret& secret, const std::string& host_nonce,
                                const std::string& launcher_nonce) {
  return "proof\t" + launcher_nonce + "\t" + secret.mac(transcript("launcher", host_nonce, launcher_nonce)) + "\n";
}

std::optional<std::string> check_launcher_proof(const secret::JobSecret& secret, const std::string& host_nonce,
                                                const std::string& line) {
  const auto f = fields(line);
  if (f.size() != 3 || f[0] != "proof" || !is_nonce(f[1]) || f[1] == host_nonce) return std::nullopt;
  if (!secret.verify(transcript("launcher", host_nonce, f[1]), f[2])) return std::nullopt;
  return f[1];
}

std::string host_proof_line(const secret::JobSecret& secret, const std::string& host_nonce,
                            const std::string& launcher_nonce) {
  return "proof\t" + secret.mac(transcript("host", host_nonce, launcher_nonce)) + "\n";
}

bool check_host_proof(const secret::JobSecret& secret, const std::string& host_nonce, const std::string& launcher_nonce,
                      const std::string& line) {
  const auto f = fields(line);
  return f.size() == 2 && f[0] == "proof" && secret.verify(transcript("host", host_nonce, launcher_nonce), f[1]);
}

}  // namespace accel::launch
