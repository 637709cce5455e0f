// One generation of workers: spawn, relay, reap, stop; see worker_group.hpp.
// Failure detection: SIGCHLD writes to the SignalGuard's self-pipe, which is polled together with
// every worker pipe, so an exit wakes the loop at once; each wake-up reaps with waitpid(pid, WNOHANG)
// on our own pids only (other children of the host process are never touched). A slow tick bounds
// the latency even if a SIGCHLD went to a thread that has it blocked.
// Flight records (docs/design/0025): with plan.flight_dir set, the first failure or interrupt first
// asks the live workers for their records and waits up to kCollectWait for them (relaying output
// and reaping meanwhile), prints the diagnosis, and only then stops the group.
#include "runtime/launch/worker_group.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>

#include "runtime/common/job_secret.hpp"
#include "runtime/common/wall_clock.hpp"
#include "runtime/launch/flight_collection.hpp"
#include "runtime/launch/process_state.hpp"
#include "runtime/launch/rendezvous_listener.hpp"
#include "runtime/launch/signal_names.hpp"
#include "runtime/launch/shm_sweep.hpp"
#include "runtime/launch/worker_process.hpp"

namespace accel::launch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kTick{250};          // safety re-check of waitpid() while idle
constexpr milliseconds kDrainGrace{500};    // after the last exit, wait this long for pipes to close
constexpr size_t kReadChunk = 64 * 1024;
// How long the launcher waits for the workers' flight records before it stops them: a dump takes
// milliseconds; the margin is for a loaded machine. A second SIGINT/SIGTERM skips the wait.
constexpr milliseconds kCollectWait{2000};
constexpr milliseconds kCollectPoll{20};  // how often the dump files are checked meanwhile

struct Stream {
  int fd = -1;
  LineRelay relay;
};

class WorkerGroup {
 public:
  WorkerGroup(const LaunchPlan& plan, const GroupSetup& setup, SignalGuard& guard)
      : plan_(plan), setup_(setup), guard_(guard) {
    result_.workers.resize(static_cast<size_t>(plan.local_world_size));
    streams_.reserve(2 * result_.workers.size());  // relays point into workers: no reallocation
    if (!plan.flight_dir.empty()) {
      const std::string file = plan.machine_rank == 0 ? "diagnosis.txt"
                                                      : "diagnosis.machine" + std::to_string(plan.machine_rank) + ".txt";
      flight_.emplace(plan.flight_dir, plan.flight_dir + "/" + file);
    }
  }

  // Only reached with live workers if an exception escaped run(): kill and reap them anyway.
  ~WorkerGroup() {
    for (WorkerRecord& worker : result_.workers) {
      if (worker.pid < 0 || worker.reaped) continue;
      killpg(worker.pid, SIGKILL);
      while (waitpid(worker.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    for (auto& stream : streams_)
      if (stream.fd >= 0) close(stream.fd);
  }
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  GroupResult run() {
    prepare_flight();
    spawn_all();
    for (;;) {
      reap();
      decide();
      if (all_reaped()) {
        // Every worker ended within one look (ranks a partition timed out together): the collection
        // has no one left to wait for, and the group must not end before its diagnosis.
        if (collecting_) finish_collection();
        if (!swept_) sweep_groups();
        if (!drain_deadline_) drain_deadline_ = Clock::now() + kDrainGrace;
        if (open_streams() == 0 || Clock::now() >= *drain_deadline_) break;
      }
      pump(next_timeout());
    }
    for (auto& stream : streams_) close_stream(stream);
    if (!result_.interrupt_signal) result_.interrupt_signal = guard_.interrupt_signal();
    return std::move(result_);
  }

 private:
  void spawn_all() {
    for (size_t i = 0; i < result_.workers.size(); ++i) {
      WorkerRecord& worker = result_.workers[i];
      worker.rank = plan_.rank_offset + static_cast<int>(i);
      EnvMap env = worker_environment(plan_, static_cast<int>(i), setup_.restart_count, setup_.master_port,
                                      setup_.base_env, setup_.cores);
      if (!flight_) env.erase("ACCEL_FLIGHT_DIR");
      const bool hosts_store = worker.rank == 0 && setup_.rendezvous_fd >= 0;
      env.erase(kRendezvousFdVariable);  // an inherited number would name someone else's descriptor
      if (hosts_store) env[kRendezvousFdVariable] = std::to_string(setup_.rendezvous_fd);
      env.erase(secret::kSecretFdVariable);  // only this launcher's memfd is the job's secret
      if (setup_.secret_fd >= 0) env[secret::kSecretFdVariable] = std::to_string(setup_.secret_fd);
      SpawnedWorker spawned;
      try {
        spawned = spawn_worker(setup_.program_path, plan_.worker_argv, environment_strings(env),
                               {hosts_store ? setup_.rendezvous_fd : -1, setup_.secret_fd});
      } catch (const SpawnError& e) {
        result_.end = GroupEnd::SpawnFailed;
        result_.spawn_error = "rank " + std::to_string(worker.rank) + " could not be started: " + e.what();
        begin_stop();
        return;
      }
      worker.pid = spawned.pid;
      const std::string prefix = "[rank " + std::to_string(worker.rank) + "] ";
      const int log_fd = i < setup_.log_fds.size() ? setup_.log_fds[i] : -1;
      // On a terminal a worker's "...\r" status lines are drawn in place (runtime/common/progress.hpp).
      streams_.push_back(Stream{spawned.stdout_fd,
                                LineRelay(prefix, STDOUT_FILENO, log_fd, &worker.tail, isatty(STDOUT_FILENO) == 1)});
      streams_.push_back(Stream{spawned.stderr_fd,
                                LineRelay(prefix, STDERR_FILENO, log_fd, &worker.tail, isatty(STDERR_FILENO) == 1)});
    }
  }

  void reap() {
    for (size_t i = 0; i < result_.workers.size(); ++i) {
      WorkerRecord& worker = result_.workers[i];
      if (worker.pid < 0 || worker.reaped) continue;
      int status = 0;
      pid_t r = waitpid(worker.pid, &status, WNOHANG);
      if (r == 0 || (r < 0 && errno == EINTR)) continue;
      worker.reaped = true;
      worker.status_lost = r < 0;
      worker.wait_status = status;
      if (collecting_) flight_->forget(worker.rank);  // a dump it wrote before it went still counts
      if (stopping_) {
        if (worker.stop_signal != SIGKILL)  // escalate() recorded when it gave up waiting
          worker.stop_time = std::chrono::duration_cast<milliseconds>(Clock::now() - stop_started_);
      } else if (worker.status_lost || !wait_status_ok(status)) {
        worker.failed_on_its_own = true;
        if (result_.first_failure < 0) result_.first_failure = static_cast<int>(i);
      }
    }
  }

  void decide() {
    if (!stopping_) {
      if (collecting_) {
        if (flight_->complete() || Clock::now() >= collect_deadline_ || guard_.interrupt_count() >= 2) {
          finish_collection();
          begin_stop();
        }
        return;
      }
      if (int sig = guard_.interrupt_signal()) {
        result_.end = GroupEnd::Interrupted;
        result_.interrupt_signal = sig;
        collect_or_stop();
      } else if (result_.first_failure >= 0) {
        result_.end = GroupEnd::WorkerFailed;
        collect_or_stop();
      } else if (stop_requested_) {  // another machine's news; this group has nothing to diagnose
        result_.end = GroupEnd::StopRequested;
        begin_stop();
      }
      return;
    }
    // The grace running out, or a second SIGINT/SIGTERM to the launcher (an impatient user), escalates.
    if (!escalated_ && (Clock::now() >= stop_deadline_ || guard_.interrupt_count() >= 2)) escalate();
  }

  // SIGTERM to every worker's process group (the leader may be gone while its children live on),
  // then SIGCONT: a stopped process (SIGSTOP, a frozen rank its peers timed out on) acts on the
  // SIGTERM only once continued, as systemd does it. Each worker's state is read first, so the
  // summary can name a frozen rank.
  void begin_stop() {
    stopping_ = true;
    stop_started_ = Clock::now();
    stop_deadline_ = stop_started_ + plan_.shutdown_grace;
    capture_states();
    for (WorkerRecord& worker : result_.workers) {
      if (worker.pid < 0) continue;
      killpg(worker.pid, SIGTERM);
      killpg(worker.pid, SIGCONT);
      if (!worker.reaped) worker.stop_signal = SIGTERM;
    }
    if (plan_.shutdown_grace.count() <= 0) escalate();
  }

  // Each live worker's /proc state, once: before a flight collection continues stopped workers.
  void capture_states() {
    if (states_captured_) return;
    states_captured_ = true;
    for (WorkerRecord& worker : result_.workers)
      if (worker.pid > 0 && !worker.reaped) worker.state_at_stop = process_state(worker.pid);
  }

  void prepare_flight() {
    if (!flight_) return;
    std::vector<int> ranks;
    for (const WorkerRecord& worker : result_.workers) ranks.push_back(worker.rank);
    const std::string problem = flight_->prepare(ranks);
    if (problem.empty()) return;
    write_all(STDERR_FILENO, "[flight] " + problem + ": no flight records are collected in this run\n");
    flight_.reset();
  }

  // The first failure or interrupt: ask the live workers for their flight records before stopping
  // them (decide() stops the group once they are in, or after kCollectWait). Stopped workers are not
  // asked: continued, a frozen rank would go on with its collective and could fail on its own before
  // the launcher's SIGTERM, which the summary reports as the frozen rank's end.
  void collect_or_stop() {
    capture_states();
    std::vector<std::pair<int, pid_t>> live;
    for (const WorkerRecord& worker : result_.workers) {
      const bool stopped = worker.state_at_stop == 'T' || worker.state_at_stop == 't';
      if (worker.pid > 0 && !worker.reaped && !stopped) live.emplace_back(worker.rank, worker.pid);
    }
    if (!flight_) return begin_stop();
    flight_->request(live, realtime_ns());
    collecting_ = true;
    collect_deadline_ = Clock::now() + kCollectWait;
  }

  void finish_collection() {
    collecting_ = false;
    std::vector<flight::RankFacts> facts;
    for (const WorkerRecord& worker : result_.workers) {
      if (worker.pid < 0) continue;
      flight::RankFacts f;
      f.rank = worker.rank;
      const std::string hang = describe_hang_state(worker.state_at_stop);
      if (worker.reaped && worker.status_lost) {
        f.process = flight::RankFacts::Process::Exited;
        f.how = "ended (exit status lost)";
      } else if (worker.reaped) {
        f.process = WIFSIGNALED(worker.wait_status) ? flight::RankFacts::Process::Killed : flight::RankFacts::Process::Exited;
        f.exit_code = WIFEXITED(worker.wait_status) ? WEXITSTATUS(worker.wait_status) : 0;
        f.how = describe_wait_status(worker.wait_status);
      } else if (!hang.empty()) {
        f.process = flight::RankFacts::Process::Stopped;
        f.how = hang;
      } else {
        f.process = flight::RankFacts::Process::Running;
        f.how = "running";
      }
      facts.push_back(std::move(f));
    }
    const std::string text = flight_->diagnose(facts, plan_.world_size);
    if (!text.empty()) write_all(STDERR_FILENO, text);
  }

  void escalate() {
    escalated_ = true;
    for (WorkerRecord& worker : result_.workers) {
      if (worker.pid < 0 || worker.reaped) continue;
      killpg(worker.pid, SIGKILL);
      worker.stop_signal = SIGKILL;
      worker.stop_time = std::chrono::duration_cast<milliseconds>(Clock::now() - stop_started_);
    }
  }

  // Every leader is reaped; SIGKILL whatever they left in their process groups (background children
  // would otherwise outlive the launch and hold our pipes open). After a clean exit too: a worker's
  // group is part of the worker.
  void sweep_groups() {
    swept_ = true;
    for (const WorkerRecord& worker : result_.workers)
      if (worker.pid > 0) killpg(worker.pid, SIGKILL);
  }

  bool all_reaped() const {
    return std::all_of(result_.workers.begin(), result_.workers.end(),
                       [](const WorkerRecord& w) { return w.pid < 0 || w.reaped; });
  }

  size_t open_streams() const {
    return static_cast<size_t>(std::count_if(streams_.begin(), streams_.end(), [](const Stream& s) { return s.fd >= 0; }));
  }

  int next_timeout() const {
    const auto now = Clock::now();
    milliseconds wait = kTick;
    auto until = [&](Clock::time_point t) {
      return std::chrono::ceil<milliseconds>(std::max(t - now, Clock::duration::zero()));
    };
    if (stopping_ && !escalated_) wait = std::min(wait, until(stop_deadline_));
    if (collecting_) wait = std::min(wait, kCollectPoll);
    if (drain_deadline_) wait = std::min(wait, until(*drain_deadline_));
    return static_cast<int>(wait.count());
  }

  void pump(int timeout_ms) {
    std::vector<pollfd> fds;
    std::vector<Stream*> owners;
    fds.push_back(pollfd{guard_.wake_fd(), POLLIN, 0});
    owners.push_back(nullptr);
    const bool watch_stop = setup_.stop_fd >= 0 && !stop_requested_;  // readable stays readable: once
    fds.push_back(pollfd{watch_stop ? setup_.stop_fd : -1, POLLIN, 0});
    owners.push_back(nullptr);
    for (auto& stream : streams_) {
      if (stream.fd < 0) continue;
      fds.push_back(pollfd{stream.fd, POLLIN, 0});
      owners.push_back(&stream);
    }
    int ready = poll(fds.data(), fds.size(), timeout_ms);
    if (ready <= 0) return;  // timeout or EINTR: the loop re-checks everything
    if (fds[0].revents) guard_.drain();
    if (fds[1].revents) stop_requested_ = true;
    for (size_t i = 2; i < fds.size(); ++i)
      if (fds[i].revents) read_stream(*owners[i]);
  }

  void read_stream(Stream& stream) {
    char buffer[kReadChunk];
    for (int rounds = 0; rounds < 4; ++rounds) {  // bounded, so one chatty rank cannot starve the rest
      ssize_t n = read(stream.fd, buffer, sizeof(buffer));
      if (n > 0) {
        stream.relay.feed(buffer, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
      close_stream(stream);  // EOF or a read error
      return;
    }
  }

  static void close_stream(Stream& stream) {
    if (stream.fd < 0) return;
    stream.relay.finish();
    close(stream.fd);
    stream.fd = -1;
  }

  const LaunchPlan& plan_;
  const GroupSetup& setup_;
  SignalGuard& guard_;
  GroupResult result_;
  std::vector<Stream> streams_;
  bool stopping_ = false;
  bool escalated_ = false;
  bool states_captured_ = false;
  std::optional<FlightCollection> flight_;  // set when plan.flight_dir is
  bool collecting_ = false;                 // waiting for flight records before stopping the group
  bool stop_requested_ = false;             // setup_.stop_fd became readable
  Clock::time_point collect_deadline_{};
  bool swept_ = false;
  Clock::time_point stop_started_{};
  Clock::time_point stop_deadline_{};
  std::optional<Clock::time_point> drain_deadline_;
};

}  // namespace

GroupResult run_worker_group(const LaunchPlan& plan, const GroupSetup& setup, SignalGuard& guard) {
  GroupResult result = WorkerGroup(plan, setup, guard).run();
  // Every worker is reaped: a segment a rank left (killed between creating and unlinking it) goes now.
  remove_worker_segments();
  return result;
}

}  // namespace accel::launch
