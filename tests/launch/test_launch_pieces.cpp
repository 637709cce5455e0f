// Unit tests of the launcher's pure pieces: the worker environment contract and its precedence,
// line relaying (prefix, tee, partial lines, tail), wait-status text, port picking, PATH lookup.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <tuple>

#include "runtime/launch/elastic_host.hpp"
#include "runtime/launch/rendezvous_listener.hpp"
#include "runtime/launch/line_relay.hpp"
#include "runtime/launch/signal_names.hpp"
#include "runtime/launch/worker_env.hpp"
#include "runtime/launch/worker_process.hpp"
#include "support/temp_dir.hpp"

using namespace accel::launch;

TEST_CASE("worker environment: contract variables, their precedence and OMP_NUM_THREADS") {
  LaunchPlan plan;
  plan.world_size = 8;
  plan.num_machines = 2;
  plan.machine_rank = 1;
  plan.local_world_size = 4;
  plan.rank_offset = 4;
  plan.master_addr = "node0";
  plan.job_file = "/runs/job.resolved.yaml";
  plan.extra_env = {{"FOO", "bar"}, {"RANK", "99"}, {"HOME", "/elsewhere"}};
  EnvMap base{{"HOME", "/home/u"}, {"PATH", "/bin"}, {"ACCEL_JOB", "/old.yaml"}};

  EnvMap env = worker_environment(plan, 2, 1, 29600, base, 16);
  CHECK(env["RANK"] == "6");  // the contract beats extra_env
  CHECK(env["LOCAL_RANK"] == "2");
  CHECK(env["WORLD_SIZE"] == "8");
  CHECK(env["LOCAL_WORLD_SIZE"] == "4");
  CHECK(env["GROUP_RANK"] == "1");
  CHECK(env["MASTER_ADDR"] == "node0");
  CHECK(env["MASTER_PORT"] == "29600");
  CHECK(env["ACCEL_JOB"] == "/runs/job.resolved.yaml");
  CHECK(env["ACCEL_RESTART_COUNT"] == "1");
  CHECK(env["OMP_NUM_THREADS"] == "4");  // 16 cores / 4 workers
  CHECK(env["FOO"] == "bar");
  CHECK(env["HOME"] == "/elsewhere");  // extra_env beats the inherited environment
  CHECK(env["PATH"] == "/bin");

  SECTION("an inherited OMP_NUM_THREADS is kept; at least one thread otherwise") {
    base["OMP_NUM_THREADS"] = "3";
    CHECK(worker_environment(plan, 0, 0, 1, base, 16)["OMP_NUM_THREADS"] == "3");
    base.erase("OMP_NUM_THREADS");
    CHECK(worker_environment(plan, 0, 0, 1, base, 2)["OMP_NUM_THREADS"] == "1");
  }
  SECTION("no job file: an inherited ACCEL_JOB is removed") {
    plan.job_file.clear();
    CHECK(worker_environment(plan, 0, 0, 1, base, 16).count("ACCEL_JOB") == 0);
  }
  SECTION("one launcher per process: LOCAL_RANK and LOCAL_WORLD_SIZE describe the machine") {
    plan.local_world_size = 1;
    plan.rank_offset = 5;
    plan.local_rank_offset = 1;
    plan.machine_local_world_size = 4;
    EnvMap one = worker_environment(plan, 0, 0, 1, base, 16);
    CHECK(one["RANK"] == "5");
    CHECK(one["LOCAL_RANK"] == "1");
    CHECK(one["LOCAL_WORLD_SIZE"] == "4");
    CHECK(one["OMP_NUM_THREADS"] == "4");
  }
}

TEST_CASE("environment_map parses NAME=value arrays") {
  char a[] = "A=1", b[] = "B=x=y", bad[] = "novalue", dup[] = "A=2";
  char* envp[] = {a, b, bad, dup, nullptr};
  EnvMap env = environment_map(envp);
  CHECK(env.size() == 2);
  CHECK(env["A"] == "1");
  CHECK(env["B"] == "x=y");
  CHECK(available_cores() >= 1);
}

TEST_CASE("line relay: prefixes complete lines, tees unprefixed, flushes the partial line at the end") {
  accel::test::TempDir dir;
  std::string term_path = (dir.path() / "term").string(), log_path = (dir.path() / "log").string();
  int term = open(term_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  LineTail tail(2);
  {
    LineRelay relay("[rank 3] ", term, log, &tail);
    for (const char* chunk : {"hel", "lo\nwor", "ld\n\nlast", " words"}) relay.feed(chunk, std::strlen(chunk));
    relay.finish();
    relay.finish();  // idempotent
  }
  close(term);
  close(log);
  CHECK(accel::test::read_file(term_path) == "[rank 3] hello\n[rank 3] world\n[rank 3] \n[rank 3] last words\n");
  CHECK(accel::test::read_file(log_path) == "hello\nworld\n\nlast words\n");
  CHECK(tail.lines() == std::vector<std::string>{"", "last words"});
}

TEST_CASE("line relay: an endless line is emitted in bounded pieces") {
  LineTail tail(10);
  LineRelay relay("", -1, -1, &tail);
  std::string big(LineRelay::kMaxLine * 2 + 10, 'x');
  relay.feed(big.data(), big.size());
  CHECK(tail.lines().size() == 2);
  relay.feed("\n", 1);
  REQUIRE(tail.lines().size() == 3);
  CHECK(tail.lines()[2].size() == 10);
}

TEST_CASE("wait statuses read as exit codes and signal names") {
  CHECK(describe_wait_status(W_EXITCODE(3, 0)) == "exited with code 3");
  CHECK(describe_wait_status(W_EXITCODE(0, SIGKILL)) == "was killed by signal 9 (SIGKILL)");
  CHECK(signal_name(SIGINT) == "SIGINT");
  CHECK(wait_status_ok(W_EXITCODE(0, 0)));
  CHECK_FALSE(wait_status_ok(W_EXITCODE(1, 0)));
}

TEST_CASE("the rendezvous listener accepts on the port it reports, and is not inherited by exec") {
  accel::launch::RendezvousListener listener(0, "127.0.0.1");
  CHECK(listener.port() > 0);
  CHECK(listener.port() < 65536);
  CHECK((fcntl(listener.fd(), F_GETFD) & FD_CLOEXEC) != 0);
  int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(listener.port()));
  CHECK(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);  // IPv4 reaches it
  close(client);
  CHECK_THROWS_WITH(accel::launch::RendezvousListener(listener.port(), "127.0.0.1"),
                    Catch::Contains("Address already in use") && Catch::Contains("main_process_port"));
}

TEST_CASE("programs are found on PATH like execvp; a missing one is a SpawnError") {
  CHECK(resolve_program("sh", "/nonexistent:/bin:/usr/bin").find("/sh") != std::string::npos);
  CHECK(resolve_program("/bin/sh", "") == "/bin/sh");
  CHECK_THROWS_AS(resolve_program("no-such-program-accel", "/bin:/usr/bin"), SpawnError);
  CHECK_THROWS_WITH(resolve_program("/nonexistent/prog", "/bin"), Catch::Contains("/nonexistent/prog"));
}

TEST_CASE("launcher connections give up on a silent peer after elastic_peer_timeout_s") {
  auto option = [](int fd, int level, int name) {
    int value = -1;
    socklen_t len = sizeof value;
    REQUIRE(getsockopt(fd, level, name, &value, &len) == 0);
    return value;
  };
  using Case = std::tuple<int, int, int>;  // timeout, then the idle time and interval of the probes
  for (const auto& [timeout_s, idle, interval] : {Case{15, 5, 2}, Case{5, 1, 1}, Case{60, 20, 10}}) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    accel::launch::enable_keepalive(fd, std::chrono::seconds(timeout_s));
    CHECK(option(fd, IPPROTO_TCP, TCP_USER_TIMEOUT) == timeout_s * 1000);  // a message unacknowledged
    CHECK(option(fd, SOL_SOCKET, SO_KEEPALIVE) == 1);                      // an idle connection
    CHECK(option(fd, IPPROTO_TCP, TCP_KEEPIDLE) == idle);
    CHECK(option(fd, IPPROTO_TCP, TCP_KEEPINTVL) == interval);
    close(fd);
  }
}
