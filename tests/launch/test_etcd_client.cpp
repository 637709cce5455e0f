// The etcd client (runtime/launch/etcd_client.hpp) and the host record of the etcd rendezvous
// (etcd_rendezvous.hpp) against a real etcd this test starts on loopback
// (docs/design/0034). Exit 77 (skipped) when Debian's etcd-server is not installed.
// Catch2's implementation: tests/catch_session.cpp (accel_catch_session).
#include <catch2/catch.hpp>

#include "tests/support/catch_session.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "runtime/launch/etcd_client.hpp"
#include "runtime/launch/etcd_rendezvous.hpp"
#include "support/reserved_port.hpp"

using namespace accel;
using namespace accel::launch;
using namespace std::chrono_literals;

namespace {

int g_client_port = 0;

config::RdzvEndpoint loopback(int port) { return {"127.0.0.1", port}; }

EtcdClient client() { return EtcdClient({loopback(g_client_port)}, 2000ms); }

std::string prefix() { return "/accel-test/" + std::to_string(getpid()) + "/"; }

}  // namespace

TEST_CASE("etcd client: put, get and delete bytes, under a lease that a revoke ends") {
  EtcdClient etcd = client();
  const std::string key = prefix() + "bytes";
  const std::string value("tab\tnewline\n\0zero \xff", 20);
  CHECK_FALSE(etcd.get(key));
  etcd.put(key, value);
  auto got = etcd.get(key);
  REQUIRE(got);
  CHECK(got->value == value);
  CHECK(got->create_revision > 0);
  CHECK(got->lease == 0);
  etcd.remove(key);
  CHECK_FALSE(etcd.get(key));

  const int64_t lease = etcd.grant(30);
  etcd.put(key, "leased", lease);
  CHECK(etcd.get(key)->lease == lease);
  CHECK(etcd.keepalive(lease) == 30);
  etcd.revoke(lease);
  CHECK_FALSE(etcd.get(key));      // the lease took its key with it
  CHECK(etcd.keepalive(lease) == 0);  // and etcd no longer knows it
  CHECK(etcd.local_address() == "127.0.0.1");
}

TEST_CASE("etcd client: create succeeds once; the loser reads the winner's value") {
  EtcdClient etcd = client();
  const std::string key = prefix() + "create";
  std::optional<EtcdValue> existing;
  CHECK(etcd.create(key, "first", 0, &existing));
  CHECK_FALSE(existing);
  CHECK_FALSE(etcd.create(key, "second", 0, &existing));
  REQUIRE(existing);
  CHECK(existing->value == "first");
  CHECK(etcd.get(key)->value == "first");

  // Eight clients race for one key: exactly one creates it, and every loser sees the winner's value.
  const std::string raced = prefix() + "raced";
  std::atomic<int> winners{0};
  std::vector<std::string> seen(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      EtcdClient mine = client();
      std::optional<EtcdValue> other;
      if (mine.create(raced, "client " + std::to_string(i), 0, &other)) {
        ++winners;
        seen[i] = "client " + std::to_string(i);
      } else if (other) {
        seen[i] = other->value;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(winners == 1);
  for (const auto& s : seen) CHECK(s == etcd.get(raced)->value);
}

TEST_CASE("etcd client: a lease not kept alive expires with its key; one kept alive does not") {
  EtcdClient etcd = client();
  const std::string lapsing = prefix() + "lapsing", kept = prefix() + "kept";
  const int64_t short_lease = etcd.grant(2), long_lease = etcd.grant(2);
  REQUIRE(etcd.create(lapsing, "a", short_lease, nullptr));
  REQUIRE(etcd.create(kept, "b", long_lease, nullptr));
  const auto start = std::chrono::steady_clock::now();
  while (etcd.get(lapsing) && std::chrono::steady_clock::now() - start < 10s) {
    CHECK(etcd.keepalive(long_lease) > 0);
    std::this_thread::sleep_for(250ms);
  }
  CHECK_FALSE(etcd.get(lapsing));
  CHECK(etcd.get(kept));
  // A lapsed key can be created again: the election's next round.
  CHECK(etcd.create(lapsing, "again", 0, nullptr));
}

TEST_CASE("etcd client: a dead member is skipped; none answering names every endpoint") {
  const int dead = accel::test::reserve_port();
  EtcdClient etcd({loopback(dead), loopback(g_client_port)}, 2000ms);
  etcd.put(prefix() + "failover", "x");
  CHECK(etcd.get(prefix() + "failover")->value == "x");

  EtcdClient nobody({loopback(dead)}, 1000ms);
  try {
    nobody.get("k");
    FAIL("no error");
  } catch (const EtcdError& e) {
    CHECK_THAT(e.what(), Catch::Contains("no etcd endpoint of rdzv_endpoint 127.0.0.1:" + std::to_string(dead) +
                                         " answered a range of k"));
  }
  // A refusal by etcd itself is not retried elsewhere and says etcd's words.
  CHECK_THROWS_WITH(etcd.put(prefix() + "k", "v", 12345), Catch::Contains("requested lease not found"));
}

TEST_CASE("etcd rendezvous: the host record reads back only under the job's secret; a forged one is refused") {
  const auto secret = accel::secret::JobSecret::generate();
  const std::string endpoint = "127.0.0.1:" + std::to_string(g_client_port);
  const int port = 40000 + getpid() % 20000;
  EtcdRendezvous job(endpoint, secret, port, 5);
  CHECK(job.prefix() == etcd_job_prefix(secret, port));
  CHECK(job.prefix().rfind("/accel/", 0) == 0);
  CHECK_FALSE(job.host());
  const int64_t lease = job.etcd().grant(30);
  const HostRecord mine{1, "10.0.0.2", 41000, 41001};
  CHECK(job.claim(mine, lease));
  CHECK(job.host() == mine);
  CHECK_FALSE(job.claim(HostRecord{2, "10.0.0.3", 1, 2}, lease));  // one host at a time
  CHECK(job.host() == mine);

  // Another job's secret: another prefix, and our record does not verify under it.
  EtcdRendezvous other(endpoint, accel::secret::JobSecret::generate(), port, 5);
  CHECK(other.prefix() != job.prefix());
  CHECK_FALSE(other.unseal(job.seal(mine)));
  // A record written by someone without the secret (an address changed, or a MAC made up).
  std::string forged = job.seal(mine);
  forged.replace(forged.find("10.0.0.2"), 8, "10.6.6.6");
  job.etcd().put(job.prefix() + "host", forged, lease);
  CHECK_THROWS_WITH(job.host(), Catch::Contains("does not carry this job's MAC"));
  job.etcd().revoke(lease);
  CHECK_FALSE(job.host());
}

TEST_CASE("etcd rendezvous: the host's lease of rdzv_lease_s is renewed past its TTL; one below etcd's minimum is refused") {
  EtcdClient etcd = client();
  CHECK(etcd_request_timeout(5) == 1500ms);
  CHECK(etcd_request_timeout(2) == 666ms);  // renewals every 667 ms, each answered within a third of the lease
  std::atomic<int> lost{0};
  const std::string key = prefix() + "leased-host";
  {
    HostLease lease(etcd, 2, [&](const std::string&) { ++lost; });
    REQUIRE(etcd.create(key, "h", lease.id(), nullptr));
    std::this_thread::sleep_for(3s);  // past the TTL: only the renewals keep the key
    CHECK(etcd.get(key));
    CHECK(lost == 0);
  }
  CHECK_FALSE(etcd.get(key));  // the lease is revoked with its holder

  // etcd's defaults (election timeout 1 s) make its shortest lease ceil(1.5 s) = 2 s: a 1 s lease is
  // granted as 2 s, which the survivors, counting 1 s, would take for a live host.
  try {
    HostLease too_short(etcd, 1, [](const std::string&) {});
    FAIL("a lease etcd lengthened was kept");
  } catch (const EtcdError&) {
    FAIL("the refusal is not an etcd error: it names the key to change");
  } catch (const std::runtime_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("rdzv_lease_s: etcd at 127.0.0.1:" + std::to_string(g_client_port) +
                                         " granted a lease of 2 s where rdzv_lease_s asks for 1 s"));
    CHECK_THAT(e.what(), Catch::Contains("set rdzv_lease_s: 2 or more"));
  }
}

int main(int argc, char* argv[]) {
  if (std::system("command -v etcd > /dev/null 2>&1") != 0) {
    std::printf("skipped: etcd is not installed (Debian etcd-server; scripts/setup.sh --tests)\n");
    return 77;
  }
  char dir_template[] = "/tmp/accel-etcd-test-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  g_client_port = accel::test::reserve_port();
  const int peer_port = accel::test::reserve_port();
  const std::string client_url = "http://127.0.0.1:" + std::to_string(g_client_port);
  const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer_port);
  const pid_t etcd = fork();
  if (etcd == 0) {
    const std::string log = dir + "/etcd.log";
    std::freopen(log.c_str(), "w", stdout);
    std::freopen(log.c_str(), "a", stderr);
    execlp("etcd", "etcd", "--name", "t", "--data-dir", (dir + "/data").c_str(), "--listen-client-urls",
           client_url.c_str(), "--advertise-client-urls", client_url.c_str(), "--listen-peer-urls", peer_url.c_str(),
           "--initial-advertise-peer-urls", peer_url.c_str(), "--initial-cluster", ("t=" + peer_url).c_str(),
           static_cast<char*>(nullptr));
    _exit(127);
  }
  // Ready when it answers a range (about a second).
  bool ready = false;
  for (int i = 0; i < 100 && !ready; ++i) {
    try {
      client().get("ready");
      ready = true;
    } catch (const EtcdError&) {
      std::this_thread::sleep_for(100ms);
    }
  }
  int status = 1;
  if (ready) status = accel::test::run_catch_session(argc, argv);
  else std::fprintf(stderr, "etcd did not answer on %s within 10 s; its log: %s/etcd.log\n", client_url.c_str(), dir.c_str());
  kill(etcd, SIGTERM);
  waitpid(etcd, nullptr, 0);
  if (ready) std::filesystem::remove_all(dir);
  return status;
}
