// The worker's glibc malloc settings (runtime/worker/host_malloc.hpp): when they apply, and that
// they keep a freed block's pages for the next allocation of that size.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "runtime/worker/host_malloc.hpp"

using accel::worker::apply_host_malloc;
using accel::worker::plan_host_malloc;

namespace {

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Keeps the compiler from eliding an allocation that is only written.
void escape(void* p) { asm volatile("" : : "g"(p) : "memory"); }

// Allocates, touches and frees an 8 MiB block, then does it again: the page faults of the second
// round. A step's activations follow this pattern.
long faults_when_reallocated() {
  constexpr std::size_t kBytes = std::size_t(8) << 20;
  void* first = std::malloc(kBytes);
  std::memset(first, 1, kBytes);
  escape(first);
  std::free(first);
  const long before = minor_faults();
  void* second = std::malloc(kBytes);
  std::memset(second, 2, kBytes);
  escape(second);
  const long faults = minor_faults() - before;
  std::free(second);
  return faults;
}

// The same, in a child process (so that this process's settings are not the ones measured).
long faults_when_reallocated_in_child(bool tuned) {
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (tuned) apply_host_malloc(plan_host_malloc({}));
    const long faults = faults_when_reallocated();
    ssize_t written = write(pipe_fds[1], &faults, sizeof faults);
    _exit(written == sizeof faults ? 0 : 1);
  }
  close(pipe_fds[1]);
  long faults = -1;
  REQUIRE(read(pipe_fds[0], &faults, sizeof faults) == sizeof faults);
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  return faults;
}

}  // namespace

TEST_CASE("host malloc: a worker keeps freed memory unless the user set glibc's malloc settings") {
  auto plan = plan_host_malloc({{"PATH", "/usr/bin"}, {"GLIBC_TUNABLES", "glibc.cpu.hwcaps=-AVX512F"}});
  CHECK(plan.tune);
  CHECK(plan.mmap_threshold == std::size_t(32) << 20);
  CHECK_FALSE(plan.trim_heap_top);

  plan = plan_host_malloc({{"GLIBC_TUNABLES", "glibc.malloc.trim_threshold=131072"}});
  CHECK_FALSE(plan.tune);
  CHECK(plan.reason.find("GLIBC_TUNABLES") != std::string::npos);
  CHECK(apply_host_malloc(plan).find("left as they are") != std::string::npos);

  plan = plan_host_malloc({{"MALLOC_MMAP_THRESHOLD_", "65536"}});
  CHECK_FALSE(plan.tune);
  CHECK(plan.reason.find("MALLOC_MMAP_THRESHOLD_") != std::string::npos);
  CHECK(plan_host_malloc({{"MALLOC_ARENA_MAX", "2"}}).tune);  // not a threshold
}

TEST_CASE("host malloc: with the worker's settings a freed block's pages are reused, not faulted in again") {
  // 8 MiB is 2048 pages of 4 KiB. glibc's defaults map a block that size on its own and unmap it
  // when freed, so touching it again faults every page; the worker's settings keep it in the heap.
  const long untuned = faults_when_reallocated_in_child(false);
  const long tuned = faults_when_reallocated_in_child(true);
  INFO("page faults on reallocation: glibc defaults " << untuned << ", worker settings " << tuned);
  CHECK(untuned >= 1024);
  CHECK(tuned < 64);
}
