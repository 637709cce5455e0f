// Fixed ports for tests that run several launchers of one job on loopback; the C++ side of
// tests/numerics/reserved_ports.py (same lock directory, same range; the reasons are there): a
// port just below the kernel's ephemeral range, locked for the life of the test process.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>

namespace accel::test {

namespace reserved_port_detail {

inline bool bindable(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

inline int ephemeral_low() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return in >> low && low > 0 ? low : 32768;
}

}  // namespace reserved_port_detail

// A port no other test process holds and nothing listens on; its lock is never released before
// the process exits (the descriptor stays open on purpose).
inline int reserve_port() {
  namespace fs = std::filesystem;
  constexpr int kSpan = 8192;
  const fs::path dir = fs::temp_directory_path() / "accel-test-ports";
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::all, fs::perm_options::add);
  const int high = reserved_port_detail::ephemeral_low(), low = std::max(1024, high - kSpan);
  std::random_device seed;
  const int start = std::uniform_int_distribution<int>(low, high - 1)(seed);
  for (int i = 0; i < high - low; ++i) {
    const int port = low + (start - low + i) % (high - low);
    int fd = open((dir / std::to_string(port)).c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0666);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 || !reserved_port_detail::bindable(port)) {
      close(fd);
      continue;
    }
    return port;  // fd stays open: the lock lasts as long as this process
  }
  throw std::runtime_error("no free test port in " + std::to_string(low) + ".." + std::to_string(high - 1));
}

}  // namespace accel::test
