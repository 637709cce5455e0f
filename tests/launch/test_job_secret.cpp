// The job secret and what it authenticates (runtime/common/job_secret.hpp, sealed_value.hpp,
// runtime/launch/membership_auth.hpp, elastic_host.hpp; SECURITY.md): the secret file's checks, the
// memfd workers inherit, the MACs, the membership listener's challenge-response against a peer
// without the secret, and listeners bound to the job's address only.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>

#include "runtime/common/errors.hpp"
#include "runtime/common/job_secret.hpp"
#include "runtime/common/sealed_value.hpp"
#include "runtime/common/shm_segment_name.hpp"
#include "runtime/launch/elastic_client.hpp"
#include "runtime/launch/elastic_host.hpp"
#include "runtime/launch/elastic_messages.hpp"
#include "runtime/launch/membership_auth.hpp"
#include "runtime/launch/rendezvous_listener.hpp"
#include "runtime/launch/shm_sweep.hpp"
#include "runtime/launch/signal_guard.hpp"
#include "launch_test_support.hpp"
#include "runtime/launch/launch_plan.hpp"
#include "support/reserved_port.hpp"
#include "support/temp_dir.hpp"

using namespace accel::launch;
using accel::test::TempDir;
using accel::test::launch::script_plan;
using accel::secret::JobSecret;

namespace {

std::string js_write_secret(const std::filesystem::path& path, const std::string& bytes, mode_t mode) {
  std::ofstream(path) << bytes;
  chmod(path.c_str(), mode);
  return path.string();
}

int js_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// The next '\n'-terminated line on `fd` within 10 s; nullopt when the peer closes first.
std::optional<std::string> js_read_line(int fd, std::string& pending) {
  for (;;) {
    if (size_t eol = pending.find('\n'); eol != std::string::npos) {
      std::string line = pending.substr(0, eol);
      pending.erase(0, eol + 1);
      return line;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10000) <= 0) return std::nullopt;
    char buffer[4096];
    ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) return std::nullopt;
    pending.append(buffer, static_cast<size_t>(n));
  }
}

void js_send(int fd, const std::string& text) {
  REQUIRE(send(fd, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size()));
}

}  // namespace

TEST_CASE("a secret file is refused when it is a link, not a regular file, wider than 0600, another user's, "
          "short or huge") {
  TempDir dir;
  const std::string good = js_write_secret(dir.path() / "secret", std::string(32, 'k'), 0600);
  CHECK(JobSecret::from_file(good).present());
  CHECK(JobSecret::from_file(good).mac("m") == JobSecret::from_file(good).mac("m"));

  const std::string link = (dir.path() / "link").string();
  REQUIRE(symlink(good.c_str(), link.c_str()) == 0);
  CHECK_THROWS_MATCHES(JobSecret::from_file(link), accel::UsageError,
                       Catch::Matchers::Predicate<accel::UsageError>([&](const accel::UsageError& e) {
                         const std::string what = e.what();
                         return what.find("ACCEL_SECRET_FILE=" + link) != std::string::npos &&
                                what.find("symbolic link") != std::string::npos;
                       }));
  const std::string shared = js_write_secret(dir.path() / "shared", std::string(32, 'k'), 0644);
  CHECK_THROWS_WITH(JobSecret::from_file(shared), Catch::Contains("its mode is 0644") && Catch::Contains("chmod 600"));
  const std::string short_one = js_write_secret(dir.path() / "short", std::string(31, 'k'), 0600);
  CHECK_THROWS_WITH(JobSecret::from_file(short_one), Catch::Contains("holds 31 bytes") && Catch::Contains("256 bits"));
  CHECK_THROWS_AS(JobSecret::from_file((dir.path() / "missing").string()), accel::UsageError);
  // Anything but a regular file, a key of implausible size, and mode bits beyond 0600.
  const std::string directory = (dir.path() / "a_directory").string();
  std::filesystem::create_directory(directory);
  const std::string fifo = (dir.path() / "fifo").string();
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);  // opened without blocking, never read
  for (const std::string& path : {directory, fifo})
    CHECK_THROWS_WITH(JobSecret::from_file(path), Catch::Contains("ACCEL_SECRET_FILE=" + path) &&
                                                      Catch::Contains("not a regular file") && Catch::Contains("fix:"));
  const std::string huge = js_write_secret(dir.path() / "huge", std::string(4097, 'k'), 0600);
  CHECK_THROWS_WITH(JobSecret::from_file(huge), Catch::Contains("holds 4097 bytes") && Catch::Contains("at most 4096"));
  CHECK(JobSecret::from_file(js_write_secret(dir.path() / "largest", std::string(4096, 'k'), 0600)).present());
  const std::string executable = js_write_secret(dir.path() / "executable", std::string(32, 'k'), 0700);
  CHECK_THROWS_WITH(JobSecret::from_file(executable), Catch::Contains("its mode is 0700") &&
                                                          Catch::Contains("wider than 0600") && Catch::Contains("chmod 600"));
  CHECK(JobSecret::from_file(js_write_secret(dir.path() / "read_only", std::string(32, 'k'), 0400)).present());
  if (geteuid() == 0) {  // a file of another user: root can make one
    const std::string foreign = js_write_secret(dir.path() / "foreign", std::string(32, 'k'), 0600);
    REQUIRE(chown(foreign.c_str(), 65534, 65534) == 0);
    CHECK_THROWS_WITH(JobSecret::from_file(foreign), Catch::Contains("belongs to uid 65534"));
  }
}

TEST_CASE("workers get the secret through a sealed memfd, and MACs differ under another secret") {
  const JobSecret secret = JobSecret::generate();
  const JobSecret other = JobSecret::generate();
  const int fd = secret.to_memfd();
  CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  CHECK(write(fd, "x", 1) < 0);  // sealed against writes
  const JobSecret copy = JobSecret::from_fd(fd);  // closes fd
  CHECK(copy.mac("accel/0/done/1") == secret.mac("accel/0/done/1"));
  CHECK(secret.verify("m", secret.mac("m")));
  CHECK_FALSE(other.verify("m", secret.mac("m")));
  CHECK_FALSE(secret.verify("m2", secret.mac("m")));
  CHECK(secret.mac("m").size() == 64);

  // An ordinary (unsealed) file descriptor is not the launcher's secret.
  TempDir dir;
  const std::string path = js_write_secret(dir.path() / "plain", std::string(32, 'k'), 0600);
  CHECK_THROWS_WITH(JobSecret::from_fd(open(path.c_str(), O_RDONLY | O_CLOEXEC)),
                    Catch::Contains("not the launcher's sealed secret"));
}

TEST_CASE("a store value without the job's MAC is refused, naming its key") {
  const std::string sealed = accel::secret::seal("accel/0/gloo/shm/segment", "/accel-shm-1-ab 42 2");
  CHECK(accel::secret::unseal("accel/0/gloo/shm/segment", sealed) == "/accel-shm-1-ab 42 2");
  CHECK_THROWS_WITH(accel::secret::unseal("accel/0/gloo/shm/other", sealed),  // moved to another key
                    Catch::Contains("key accel/0/gloo/shm/other does not carry this job's MAC"));
  CHECK_THROWS_AS(accel::secret::unseal("k", "/accel-shm-evil 1 2"), accel::RunError);
  CHECK_THROWS_AS(accel::secret::unseal("k", "garbage\t00"), accel::RunError);
}

TEST_CASE("the membership handshake: each side proves the secret over the other's fresh nonce") {
  const JobSecret secret = JobSecret::generate(), other = JobSecret::generate();
  const std::string host_nonce = fresh_nonce(), nonce = fresh_nonce();
  CHECK(host_nonce != nonce);
  const auto hello = hello_line(host_nonce);
  REQUIRE(parse_hello(hello.substr(0, hello.size() - 1)) == host_nonce);
  CHECK_FALSE(parse_hello("hello\tnot-a-nonce"));

  auto line = [](std::string text) { return text.substr(0, text.size() - 1); };
  CHECK(check_launcher_proof(secret, host_nonce, line(launcher_proof_line(secret, host_nonce, nonce))) == nonce);
  CHECK_FALSE(check_launcher_proof(secret, host_nonce, line(launcher_proof_line(other, host_nonce, nonce))));
  CHECK_FALSE(check_launcher_proof(secret, fresh_nonce(), line(launcher_proof_line(secret, host_nonce, nonce))));
  CHECK(check_host_proof(secret, host_nonce, nonce, line(host_proof_line(secret, host_nonce, nonce))));
  CHECK_FALSE(check_host_proof(other, host_nonce, nonce, line(host_proof_line(secret, host_nonce, nonce))));
  // The host's proof is not a launcher's (no reflection): its role is in the MAC.
  const std::string host_mac = line(host_proof_line(secret, host_nonce, nonce)).substr(6);
  CHECK_FALSE(check_launcher_proof(secret, host_nonce, "proof\t" + nonce + "\t" + host_mac));
}

TEST_CASE("the membership listener closes a peer without the secret and goes on serving the job") {
  const JobSecret secret = JobSecret::generate();
  RoundLimits limits;
  limits.min_machines = 1;
  limits.max_machines = 2;
  limits.join_window = std::chrono::milliseconds(100);
  limits.worker_port = 4321;
  ElasticHost host(0, "127.0.0.1", limits, secret);

  // A fake "machine 1": it cannot prove the secret, so its join (and its terminal escape) is never read.
  const int fake = js_connect(host.port());
  REQUIRE(fake >= 0);
  std::string fake_pending;
  const auto fake_hello = js_read_line(fake, fake_pending);
  REQUIRE(fake_hello);
  REQUIRE(parse_hello(*fake_hello));
  js_send(fake, "proof\t" + fresh_nonce() + "\t" + std::string(64, '0') + "\njoin\t1\t\x1b[2Jevil\n");
  CHECK_FALSE(js_read_line(fake, fake_pending));  // closed by the host, nothing more sent
  close(fake);

  // The real machine 0 proves the secret, joins, and gets its round (machine 0 alone after the window).
  const int real = js_connect(host.port());
  REQUIRE(real >= 0);
  std::string pending;
  const auto hello = js_read_line(real, pending);
  REQUIRE(hello);
  const auto host_nonce = parse_hello(*hello);
  REQUIRE(host_nonce);
  const std::string nonce = fresh_nonce();
  js_send(real, launcher_proof_line(secret, *host_nonce, nonce));
  const auto proof = js_read_line(real, pending);
  REQUIRE(proof);
  CHECK(check_host_proof(secret, *host_nonce, nonce, *proof));
  ElasticMessage join;
  join.kind = ElasticKind::Join;
  join.machine = 0;
  join.text = "host0";
  js_send(real, encode(join));
  const auto round = js_read_line(real, pending);
  REQUIRE(round);
  const auto message = decode(*round);
  REQUIRE(message);
  CHECK(message->kind == ElasticKind::Round);
  CHECK(message->machines == std::vector<int>{0});  // the fake machine 1 never joined
  CHECK(message->worker_port == 4321);
  close(real);
}

TEST_CASE("a peer's text is printed with its control bytes escaped") {
  CHECK(accel::secret::printable("a\x1b[2Jb\x7f") == "a\\x1b[2Jb\\x7f");
  const auto m = decode("failed\t0\trank 2 \x1b[2J died");
  REQUIRE(m);
  CHECK(m->text == "rank 2 \\x1b[2J died");
}

TEST_CASE("listeners bind the job's address only: loopback is not reachable from another interface") {
  RendezvousListener listener(0, "127.0.0.1");
  CHECK(listener.address() == "127.0.0.1");
  sockaddr_in bound{};
  socklen_t len = sizeof bound;
  REQUIRE(getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&bound), &len) == 0);
  CHECK(bound.sin_family == AF_INET);
  CHECK(ntohl(bound.sin_addr.s_addr) == INADDR_LOOPBACK);
  // Every non-loopback IPv4 address of this machine is refused.
  ifaddrs* addrs = nullptr;
  REQUIRE(getifaddrs(&addrs) == 0);
  for (ifaddrs* a = addrs; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    sockaddr_in target = *reinterpret_cast<sockaddr_in*>(a->ifa_addr);
    if (ntohl(target.sin_addr.s_addr) >> 24 == 127) continue;
    target.sin_port = htons(static_cast<uint16_t>(listener.port()));
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    INFO("interface " << a->ifa_name);
    CHECK(connect(fd, reinterpret_cast<sockaddr*>(&target), sizeof target) != 0);
    close(fd);
  }
  freeifaddrs(addrs);
  CHECK(is_loopback_address("127.0.0.1"));
  CHECK(is_loopback_address("::1"));
  CHECK_FALSE(is_loopback_address("10.0.0.1"));
}

// Issue 48's leaked segment: a rank killed between creating its segment and unlinking it. The
// launcher removes the segments named for it once the group ends, however the rank died.
TEST_CASE("a segment a killed rank left in /dev/shm is removed when its group ends") {
  TempDir dir;
  LaunchPlan plan = script_plan(dir,
                                "if [ \"$RANK\" = 0 ]; then "
                                "seg=/dev/shm/accel-shm-$PPID-$(stat -Lc %i /proc/self/ns/pid)-0feedface && "
                                "head -c 4096 /dev/zero > $seg && echo $seg > \"$OUT_DIR/segment\" && "
                                "echo $PPID > \"$OUT_DIR/launcher\" && kill -9 $$; fi\nsleep 30\n",
                                2);
  LaunchResult result = run_launch(plan);
  CHECK(result.exit_code == 1);
  std::ifstream launcher_pid(dir.path() / "launcher");
  std::string pid;
  launcher_pid >> pid;
  REQUIRE(pid == std::to_string(getpid()));  // the segment was made; run_launch() is the launcher here
  std::ifstream segment_name(dir.path() / "segment");
  std::string segment;
  segment_name >> segment;
  REQUIRE(!segment.empty());
  CHECK_FALSE(std::filesystem::exists(segment));
}

// A SIGKILLed launcher's workers die with it, so no process of its job can remove a segment left in
// the create-unlink window: the next launch removes the segments of this namespace's gone launchers.
TEST_CASE("a launch removes the segments of launchers that are gone, and only those") {
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  REQUIRE(waitpid(gone, nullptr, 0) == gone);
  const std::string ns = std::to_string(accel::shm_name::pid_namespace_id());
  auto plant = [](const std::string& name) {
    std::ofstream("/dev/shm/" + name) << "x";
    return "/dev/shm/" + name;
  };
  const std::string of_gone = plant(accel::shm_name::segment_prefix(gone) + "0feedface");
  const std::string of_live = plant(accel::shm_name::segment_prefix(getppid()) + "0feedface");
  const std::string other_ns = plant("accel-shm-" + std::to_string(gone) + "-1" + ns + "-0feedface");
  const std::string old_name = plant("accel-shm-" + std::to_string(gone) + "-0feedface");
  CHECK(accel::launch::remove_segments_of_gone_launchers() >= 1);
  CHECK_FALSE(std::filesystem::exists(of_gone));
  for (const std::string& kept : {of_live, other_ns, old_name}) {
    CHECK(std::filesystem::exists(kept));
    std::filesystem::remove(kept);
  }
}

TEST_CASE("a one-machine launch hands every worker the same secret by memfd, never in argv or a value") {
  TempDir dir;
  LaunchPlan plan = script_plan(dir,
                                "fd=$ACCEL_SECRET_FD; test -n \"$fd\" || exit 3\n"
                                "readlink /proc/$$/fd/$fd > \"$OUT_DIR/link_$RANK\"\n"
                                "sha256sum < /proc/$$/fd/$fd > \"$OUT_DIR/sum_$RANK\"\n"
                                "stat -L -c %s /proc/$$/fd/$fd > \"$OUT_DIR/size_$RANK\"\n",
                                2);
  plan.extra_env.erase(accel::secret::kSecretFileVariable);
  LaunchResult result = run_launch(plan);
  REQUIRE(result.exit_code == 0);
  auto text = [&](const std::string& name) {
    std::ifstream in(dir.path() / name);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  CHECK(text("link_0").rfind("/memfd:accel-job-secret", 0) == 0);
  CHECK(text("size_0") == "32\n");
  CHECK(text("sum_0") == text("sum_1"));
}

TEST_CASE("a launcher given another secret file is refused by machine 0 and says which setting to fix") {
  RoundLimits limits;
  limits.min_machines = 1;
  limits.max_machines = 2;
  ElasticHost host(0, "127.0.0.1", limits, JobSecret::generate());
  SignalGuard guard;
  CHECK_THROWS_WITH(ElasticClient("127.0.0.1", host.port(), std::chrono::seconds(5), guard, JobSecret::generate()),
                    Catch::Contains("machine 0's rendezvous at 127.0.0.1:" + std::to_string(host.port())) &&
                        Catch::Contains("refused this launcher's proof") && Catch::Contains("ACCEL_SECRET_FILE"));
}

TEST_CASE("a launcher refuses a 'machine 0' that cannot prove the secret (something else took the port)") {
  RendezvousListener impostor(0, "127.0.0.1");
  std::thread answer([&] {
    const int fd = accept4(impostor.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    const std::string hello = hello_line(fresh_nonce());
    send(fd, hello.data(), hello.size(), MSG_NOSIGNAL);
    std::string pending;
    js_read_line(fd, pending);  // the launcher's proof
    const std::string forged = "proof\t" + std::string(64, 'a') + "\n";
    send(fd, forged.data(), forged.size(), MSG_NOSIGNAL);
    js_read_line(fd, pending);  // until the launcher closes
    close(fd);
  });
  SignalGuard guard;
  CHECK_THROWS_WITH(ElasticClient("127.0.0.1", impostor.port(), std::chrono::seconds(5), guard, JobSecret::generate()),
                    Catch::Contains("did not prove it holds this job's secret"));
  answer.join();
}

TEST_CASE("a launch with a refused ACCEL_SECRET_FILE ends with exit 2 before any worker starts, naming the file") {
  TempDir dir;
  const std::string shared = js_write_secret(dir.path() / "secret", std::string(32, 'k'), 0640);
  LaunchPlan plan = script_plan(dir, "touch \"$OUT_DIR/started_$RANK\"\n", 2);
  setenv(accel::secret::kSecretFileVariable, shared.c_str(), 1);
  LaunchResult result = run_launch(plan);
  unsetenv(accel::secret::kSecretFileVariable);
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.summary, Catch::Contains("ACCEL_SECRET_FILE=" + shared) && Catch::Contains("its mode is 0640"));
  CHECK_FALSE(std::filesystem::exists(dir.path() / "started_0"));
}

// Issue 48's default: a job whose launchers cannot share a secret they drew themselves needs the
// file; without it nothing starts. The port is held here, so a launcher that reached its listener
// would end with exit 1 (address in use), not with the refusal.
TEST_CASE("a launcher of a multi-launcher job without ACCEL_SECRET_FILE is refused before its listener, with the recipe") {
  TempDir dir;
  unsetenv(accel::secret::kSecretFileVariable);
  RendezvousListener held(0, "127.0.0.1");
  LaunchPlan plan = script_plan(dir, "touch \"$OUT_DIR/started_$RANK\"\n", 2);
  plan.master_port = held.port();
  std::string layout;
  SECTION("two machines") {
    plan.world_size = 4;
    plan.num_machines = 2;
    layout = "this job spans 2 machines (num_machines), one launcher each";
  }
  SECTION("a scheduler's task per process") {
    plan.local_world_size = 1;
    plan.machine_local_world_size = 2;
    layout = "this launcher runs ranks 0..0 of the job's 2 and a scheduler (srun/mpirun, one task per process)";
  }
  LaunchResult result = run_launch(plan);
  INFO(result.summary);
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.summary, Catch::StartsWith("no job secret: " + layout) &&
                                 Catch::Contains("ACCEL_SECRET_FILE is not set") && Catch::Contains("nothing was started"));
  CHECK_THAT(result.summary, Catch::Contains("(umask 077; head -c 32 /dev/urandom > ~/.accel-secret)") &&
                                 Catch::Contains("openssl rand 32") &&
                                 Catch::Contains("export ACCEL_SECRET_FILE=~/.accel-secret-$SLURM_JOB_ID") &&
                                 Catch::Contains("mpirun -x ACCEL_SECRET_FILE") &&
                                 Catch::Contains("allow_unauthenticated: true"));
  CHECK_FALSE(std::filesystem::exists(dir.path() / "started_0"));
  CHECK_FALSE(std::filesystem::exists(dir.path() / "logs"));
}

TEST_CASE("with allow_unauthenticated a multi-launcher job without the file runs, and its launcher warns once") {
  TempDir dir;
  unsetenv(accel::secret::kSecretFileVariable);
  LaunchPlan plan = script_plan(dir, "test -z \"${ACCEL_SECRET_FD:-}\" && touch \"$OUT_DIR/started_$RANK\"\n", 2);
  plan.world_size = 4;
  plan.num_machines = 2;
  plan.master_port = accel::test::reserve_port();
  plan.allow_unauthenticated = true;
  accel::test::launch::ForkedLauncher launcher = accel::test::launch::fork_launcher(dir, plan);
  const int status = accel::test::launch::wait_launcher(launcher, std::chrono::seconds(60));
  const std::string err = accel::test::read_file(launcher.stderr_path);
  INFO(err);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CHECK(std::filesystem::exists(dir.path() / "started_0"));  // with no secret to hand over (no ACCEL_SECRET_FD)
  CHECK(std::filesystem::exists(dir.path() / "started_1"));
  const std::string warning = "[launcher] warning: no job secret: this job spans 2 machines";
  CHECK(err.find(warning) != std::string::npos);
  CHECK(err.find(warning) == err.rfind(warning));
  CHECK_THAT(err, Catch::Contains("allow_unauthenticated: true") && Catch::Contains("SECURITY.md"));
}
