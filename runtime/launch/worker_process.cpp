// fork + execve of one worker in its own process group; see worker_process.hpp.
#include "runtime/launch/worker_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace accel::launch {
namespace {

// Closes the descriptors it holds unless released.
struct FdSet {
  std::vector<int> fds;
  ~FdSet() {
    for (int fd : fds)
      if (fd >= 0) close(fd);
  }
  int add(int fd) {
    fds.push_back(fd);
    return fd;
  }
  void release(int fd) {
    for (int& held : fds)
      if (held == fd) held = -1;
  }
};

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

// Moves a descriptor above 0..2, so the child's dup2() onto stdio never clobbers another one (the
// launcher itself may run with a closed stdin). Returns -1 (and closes `fd`) on failure.
int above_stdio(int fd) {
  if (fd < 0 || fd > 2) return fd;
  int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  int saved = errno;
  close(fd);
  errno = saved;
  return moved;
}

[[noreturn]] void fail_to_spawn(const char* what) {
  throw SpawnError(std::string("cannot start a worker: ") + what + ": " + std::strerror(errno));
}

void make_pipe(FdSet& fds, int ends[2]) {
  int raw[2];
  if (pipe2(raw, O_CLOEXEC) != 0) fail_to_spawn("pipe2");
  ends[0] = fds.add(above_stdio(raw[0]));
  ends[1] = fds.add(above_stdio(raw[1]));
  if (ends[0] < 0 || ends[1] < 0) fail_to_spawn("fcntl(F_DUPFD_CLOEXEC)");
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (const auto& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

// Runs in the child between fork and exec: async-signal-safe calls only, never returns.
[[noreturn]] void exec_child(pid_t launcher, const char* path, char* const* argv, char* const* envp,
                             int stdin_fd, int out_fd, int err_fd, int report_fd, const int* inherit_fds,
                             size_t inherit_count) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(127);  // the launcher died before PDEATHSIG was armed

  // Handlers are reset by exec, but ignored signals and the mask are inherited: give the worker
  // defaults for what the launcher changed (SIGPIPE is ignored while run_launch() runs).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGCHLD}) sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);

  if (dup2(stdin_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) {
    int err = errno;
    ssize_t ignored = write(report_fd, &err, sizeof(err));
    (void)ignored;
    _exit(127);
  }
  for (size_t i = 0; i < inherit_count; ++i)
    if (inherit_fds[i] >= 0) fcntl(inherit_fds[i], F_SETFD, 0);
  execve(path, argv, envp);
  int err = errno;
  ssize_t ignored = write(report_fd, &err, sizeof(err));
  (void)ignored;
  _exit(127);
}

}  // namespace

std::string resolve_program(const std::string& program, const std::string& path_env) {
  if (program.empty()) throw SpawnError("the worker program is empty");
  if (program.find('/') != std::string::npos) {
    if (!is_executable_file(program)) throw SpawnError("cannot execute '" + program + "': not an executable file");
    return program;
  }
  std::string search = path_env.empty() ? "/usr/local/bin:/usr/bin:/bin" : path_env;
  size_t start = 0;
  while (start <= search.size()) {
    size_t end = search.find(':', start);
    if (end == std::string::npos) end = search.size();
    std::string dir = search.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  throw SpawnError("cannot find '" + program + "' on PATH (" + search + ")");
}

SpawnedWorker spawn_worker(const std::string& path, const std::vector<std::string>& argv,
                           const std::vector<std::string>& env, const std::vector<int>& inherit_fds) {
  FdSet fds;
  int out[2], err[2], report[2];
  make_pipe(fds, out);
  make_pipe(fds, err);
  make_pipe(fds, report);
  int devnull = fds.add(above_stdio(open("/dev/null", O_RDONLY | O_CLOEXEC)));
  if (devnull < 0) fail_to_spawn("open /dev/null");

  std::vector<char*> c_argv = c_strings(argv);
  std::vector<char*> c_env = c_strings(env);
  const pid_t launcher = getpid();

  pid_t pid = fork();
  if (pid < 0) fail_to_spawn("fork");
  if (pid == 0) exec_child(launcher, path.c_str(), c_argv.data(), c_env.data(), devnull, out[1], err[1], report[1], inherit_fds.data(),
                           inherit_fds.size());

  setpgid(pid, pid);  // also in the parent, so killpg() works even before the child runs
  close(out[1]);
  close(err[1]);
  close(report[1]);
  fds.release(out[1]);
  fds.release(err[1]);
  fds.release(report[1]);

  // The report pipe closes on a successful exec (O_CLOEXEC) or carries errno from the child.
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(report[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    throw SpawnError("cannot execute '" + path + "': " + std::strerror(child_errno));
  }

  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  fds.release(out[0]);
  fds.release(err[0]);
  return SpawnedWorker{pid, out[0], err[0]};
}

}  // namespace accel::launch
