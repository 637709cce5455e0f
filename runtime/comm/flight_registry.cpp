// The process's flight recorder: the ring registry, dump files, and the SIGUSR2 path; see
// flight_registry.hpp.
// The registry is allocated once and never freed: the detached watcher thread and a queue thread
// failing during exit may still use it after static destructors have run.
#include "runtime/comm/flight_registry.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/common/safe_file.hpp"
#include "runtime/common/wall_clock.hpp"

namespace accel::comm {
namespace {

// Closed rings kept for later dumps: a process closes a handful of communicators (world, splits);
// unit tests that close hundreds run without a dump target, which keeps none.
constexpr size_t kKeptClosed = 8;

struct Registry {
  std::mutex mutex;  // rings and target
  std::vector<std::shared_ptr<FlightRing>> rings;  // registration order
  bool configured = false;
  std::string dir;
  int rank = 0;
  int world = 0;
  std::vector<std::string> hosts;  // every rank's host, once the rendezvous told them
  std::mutex dump_mutex;  // one dump at a time
};

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

std::atomic<int> g_recording{-1};  // -1: not read yet

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// What a handler asks the watcher for, one byte through the pipe.
constexpr char kDumpRequest = 1;   // SIGUSR2: dump
constexpr char kCrashRequest = 2;  // a fatal signal: dump, then acknowledge on g_ack_pipe
// The fatal signals a crash dump is written for, with their names for the dump's reason.
constexpr std::pair<int, const char*> kFatalSignals[] = {
    {SIGABRT, "SIGABRT"}, {SIGSEGV, "SIGSEGV"}, {SIGBUS, "SIGBUS"}, {SIGFPE, "SIGFPE"}, {SIGILL, "SIGILL"}};
// How long a crashing thread waits for its dump before the process dies of the signal: a dump takes
// milliseconds; the bound is for one that cannot finish (a crash inside malloc, holding its lock).
constexpr int kCrashDumpWaitMs = 2000;

int g_signal_pipe = -1;              // the watcher reads requests here (the handlers write)
int g_ack_pipe[2] = {-1, -1};        // the watcher acknowledges a crash dump here
std::atomic<int> g_crash_signal{0};  // the first fatal signal taken
static_assert(std::atomic<int>::is_always_lock_free, "used from signal handlers");

void request_dump(char what) {
  const ssize_t n = ::write(g_signal_pipe, &what, 1);  // non-blocking: a full pipe has a dump pending
  (void)n;
}

extern "C" void on_flight_dump_signal(int) {
  const int saved = errno;
  request_dump(kDumpRequest);
  errno = saved;
}

// SA_RESETHAND gave the signal its default action back, and it is blocked while this runs: the
// raise() below ends the process with it once this returns, as if no handler had been there.
extern "C" void on_fatal_signal(int signal) {
  int first = 0;
  if (g_crash_signal.compare_exchange_strong(first, signal)) {
    request_dump(kCrashRequest);
    pollfd ack{g_ack_pipe[0], POLLIN, 0};
    ::poll(&ack, 1, kCrashDumpWaitMs);
  }
  ::raise(signal);
}

std::string crash_reason() {
  const int signal = g_crash_signal.load();
  for (const auto& [number, name] : kFatalSignals)
    if (number == signal) return "fatal signal " + std::to_string(number) + " (" + name + ")";
  return "fatal signal " + std::to_string(signal);
}

bool default_disposition(int signal) {
  struct sigaction current {};
  return sigaction(signal, nullptr, &current) == 0 && !(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_DFL;
}

void install(int signal, void (*handler)(int), int flags) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = flags;
  sigaction(signal, &action, nullptr);
}

// Starts the watcher and installs the handlers, once; a signal that already has a handler (the
// program's own, a sanitizer's) keeps it.
void start_signal_watcher() {
  static std::once_flag once;
  std::call_once(once, [] {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    if (pipe2(g_ack_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      return;
    }
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    g_signal_pipe = fds[1];
    // The watcher runs with every signal blocked: they go to the process's other threads.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    std::thread([fd = fds[0]] {
      char buf[64];
      for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        if (std::memchr(buf, kCrashRequest, static_cast<size_t>(n)) == nullptr) {
          dump_flight_records("signal");
          continue;
        }
        dump_flight_records(crash_reason());
        const char done = 1;
        const ssize_t w = ::write(g_ack_pipe[1], &done, 1);
        (void)w;
      }
    }).detach();
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (default_disposition(kFlightDumpSignal)) install(kFlightDumpSignal, on_flight_dump_signal, SA_RESTART);
    for (const auto& [signal, name] : kFatalSignals)
      if (default_disposition(signal)) install(signal, on_fatal_signal, SA_RESETHAND);
  });
}

// Under the registry mutex: the target from the launcher's environment, the first time.
void configure_from_environment(Registry& reg) {
  if (reg.configured) return;
  reg.configured = true;
  const char* dir = std::getenv("ACCEL_FLIGHT_DIR");
  reg.dir = dir ? dir : "";
  reg.rank = env_int("RANK", 0);
  reg.world = env_int("WORLD_SIZE", 1);
  if (!reg.dir.empty()) start_signal_watcher();
}

// Replaced whole (staged beside, renamed), never through a link planted at its name or the
// staged one (runtime/common/safe_file.hpp).
bool write_whole_file(const std::string& path, const std::string& text, std::string& why) {
  try {
    files::write_file_replacing(path, text);
    return true;
  } catch (const std::exception& e) {
    why = e.what();
    return false;
  }
}

}  // namespace

bool flight_recording_enabled() {
  int on = g_recording.load(std::memory_order_relaxed);
  if (on < 0) {
    const char* v = std::getenv("ACCEL_FLIGHT_RECORDER");
    on = v && std::strcmp(v, "0") == 0 ? 0 : 1;
    g_recording.store(on, std::memory_order_relaxed);
  }
  return on == 1;
}

void set_flight_recording(bool on) { g_recording.store(on ? 1 : 0, std::memory_order_relaxed); }

std::shared_ptr<FlightRing> open_flight_ring(FlightGroup group) {
  if (!flight_recording_enabled()) return nullptr;
  auto ring = std::make_shared<FlightRing>(std::move(group));
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  configure_from_environment(reg);
  reg.rings.push_back(ring);
  return ring;
}

void close_flight_ring(const std::shared_ptr<FlightRing>& ring) {
  if (!ring) return;
  ring->close();
  Registry& reg = registry();
  bool dump = false;
  {
    std::lock_guard<std::mutex> lock(reg.mutex);
    auto& rings = reg.rings;
    if (reg.dir.empty()) {
      rings.erase(std::remove(rings.begin(), rings.end(), ring), rings.end());
    } else {
      dump = true;
      size_t closed = 0;
      for (auto it = rings.rbegin(); it != rings.rend(); ++it)
        if ((*it)->closed()) ++closed;
      for (auto it = rings.begin(); it != rings.end() && closed > kKeptClosed;) {
        if ((*it)->closed()) {
          it = rings.erase(it);
          --closed;
        } else {
          ++it;
        }
      }
    }
  }
  if (dump) dump_flight_records("communicator closed");
}

void set_flight_world_hosts(std::vector<std::string> hosts) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  reg.hosts = std::move(hosts);
}

void set_flight_dump_target(const std::string& dir, int rank, int world) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  reg.configured = true;
  reg.dir = dir;
  reg.rank = rank;
  reg.world = world;
  if (!dir.empty()) start_signal_watcher();
}

flight::RankDump collect_flight_records(const std::string& reason) {
  Registry& reg = registry();
  std::vector<std::shared_ptr<FlightRing>> rings;
  flight::RankDump dump;
  {
    std::lock_guard<std::mutex> lock(reg.mutex);
    configure_from_environment(reg);
    rings = reg.rings;
    dump.rank = reg.rank;
    dump.world = reg.world;
    dump.hosts = reg.hosts;
  }
  dump.pid = static_cast<int>(::getpid());
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  dump.host = host;
  dump.reason = reason;
  dump.dumped_at_ns = realtime_ns();
  for (const auto& ring : rings) dump.groups.push_back(ring->snapshot());
  return dump;
}

std::string dump_flight_records(const std::string& reason) noexcept {
  std::string path;
  try {
    Registry& reg = registry();
    std::lock_guard<std::mutex> dump_lock(reg.dump_mutex);
    {
      std::lock_guard<std::mutex> lock(reg.mutex);
      configure_from_environment(reg);
      if (reg.dir.empty()) return "";
      ::mkdir(reg.dir.c_str(), 0755);  // accel launch created it; a program run by hand may not have
      path = reg.dir + "/rank" + std::to_string(reg.rank) + ".json";
    }
    std::string why;
    if (write_whole_file(path, flight::to_json(collect_flight_records(reason)), why)) return path;
    std::fprintf(stderr, "accel: flight recorder: cannot write %s: %s\n", path.c_str(), why.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accel: flight recorder: cannot write %s: %s\n", path.c_str(), e.what());
  } catch (...) {
    std::fprintf(stderr, "accel: flight recorder: cannot write %s\n", path.c_str());
  }
  return "";
}

}  // namespace accel::comm
