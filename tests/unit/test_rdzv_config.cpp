// rdzv_backend and rdzv_endpoint in the job file (docs/design/0034): the endpoint list's form, and
// each refusal naming the key, the allowed form and a fix.
#include <catch2/catch.hpp>

#include "runtime/config/rdzv_endpoint.hpp"
#include "support/temp_dir.hpp"
#include "unit/load_job_test_support.hpp"

using namespace accel;
using namespace accel::config;
using accel::test::error_text;
using accel::test::load;
using accel::test::TempDir;

namespace {

const char* kRdzvElasticJob = "num_processes: 4\nnum_machines: 1:2\nmax_restarts: 2\n";

}  // namespace

TEST_CASE("parse_rdzv_endpoints: host:port items, IPv6 in brackets, each problem in one line") {
  std::string problem;
  auto three = parse_rdzv_endpoints("10.0.0.5:2379, etcd-b:2380 ,[::1]:2381", &problem);
  REQUIRE(three);
  REQUIRE(three->size() == 3);
  CHECK((*three)[0].host == "10.0.0.5");
  CHECK((*three)[0].port == 2379);
  CHECK((*three)[1].text() == "etcd-b:2380");
  CHECK((*three)[2].host == "::1");
  CHECK((*three)[2].text() == "[::1]:2381");
  const std::pair<const char*, const char*> bad[] = {
      {"", "no endpoint"},
      {"a:1,,b:2", "an empty item between commas"},
      {"a:1,", "an empty item between commas"},
      {"http://a:2379", "\"http://a:2379\" has a scheme: write host:port (accel speaks plain http to etcd)"},
      {"etcd", "\"etcd\" is not host:port (an IPv6 address goes in brackets, [addr]:port)"},
      {"::1:2379", "\"::1:2379\" is not host:port (an IPv6 address goes in brackets, [addr]:port)"},
      {":2379", "\":2379\" has no host"},
      {"a:0", "\"a:0\" has no port 1..65535 after the colon"},
      {"a:65536", "\"a:65536\" has no port 1..65535 after the colon"},
      {"a:x", "\"a:x\" has no port 1..65535 after the colon"},
      {"a:", "\"a:\" has no port 1..65535 after the colon"},
      {"[::1]2379", "\"[::1]2379\" is not [IPv6]:port"},
      {"a/b:1", "\"a/b:1\" has a character a host name cannot have"},
  };
  for (const auto& [text, why] : bad) {
    INFO(text);
    CHECK_FALSE(parse_rdzv_endpoints(text, &problem));
    CHECK(problem == why);
  }
}

TEST_CASE("rdzv_backend etcd with endpoints on an elastic job loads; static is the default") {
  TempDir dir;
  auto plain = load(dir.write("plain.yaml", kRdzvElasticJob));
  CHECK(plain.job.rdzv_backend == RdzvBackend::static_);
  CHECK(plain.job.rdzv_endpoint.empty());
  auto etcd = load(dir.write("etcd.yaml", std::string(kRdzvElasticJob) +
                                              "rdzv_backend: etcd\nrdzv_endpoint: 10.0.0.5:2379,10.0.0.6:2379\n"));
  CHECK(etcd.job.rdzv_backend == RdzvBackend::etcd);
  CHECK(etcd.job.rdzv_endpoint == "10.0.0.5:2379,10.0.0.6:2379");
  auto from_env = load(dir.write("env.yaml", kRdzvElasticJob), {},
                       {{"ACCEL_RDZV_BACKEND", "etcd"}, {"ACCEL_RDZV_ENDPOINT", "127.0.0.1:2379"}});
  CHECK(from_env.job.rdzv_backend == RdzvBackend::etcd);
  CHECK(etcd.job.rdzv_lease_s == 5);  // the default lease
  auto leased = load(dir.write("lease.yaml", std::string(kRdzvElasticJob) + "rdzv_backend: etcd\n"
                                             "rdzv_endpoint: 10.0.0.5:2379\nrdzv_lease_s: 2\n"));
  CHECK(leased.job.rdzv_lease_s == 2);
  CHECK(leased.warnings.empty());
}

TEST_CASE("rdzv_lease_s: a whole number of seconds from 1, below half rendezvous_timeout_s; no effect without etcd") {
  TempDir dir;
  auto file = dir.write("job.yaml", std::string(kRdzvElasticJob) + "rdzv_backend: etcd\nrdzv_endpoint: 10.0.0.5:2379\n"
                                                               "rdzv_lease_s: 0\n");
  std::string text = error_text([&] { load(file); });
  CHECK_THAT(text, Catch::Contains(file + ":6:15: error: rdzv_lease_s:"));
  CHECK_THAT(text, Catch::Contains("integer in [1, 600]"));

  // A survivor waits up to two leases; it gives up after rendezvous_timeout_s.
  file = dir.write("etcd.yaml", std::string(kRdzvElasticJob) + "rdzv_backend: etcd\nrdzv_endpoint: 10.0.0.5:2379\n");
  text = error_text([&] { load(file, {"rdzv_lease_s=30", "rendezvous_timeout_s=60"}); });
  CHECK_THAT(text, Catch::Contains("error: rdzv_lease_s: 30 s: a survivor waits up to two leases (60 s)"));
  CHECK_THAT(text, Catch::Contains("gives up after rendezvous_timeout_s (60 s)"));
  CHECK_THAT(text, Catch::Contains("1 .. 29"));
  CHECK_THAT(text, Catch::Contains("lower rdzv_lease_s"));
  CHECK(load(file, {"rdzv_lease_s=29", "rendezvous_timeout_s=60"}).job.rdzv_lease_s == 29);

  auto stray = dir.write("stray.yaml", std::string(kRdzvElasticJob) + "rdzv_lease_s: 2\n");
  auto loaded = load(stray);
  REQUIRE(loaded.warnings.size() == 1);
  CHECK(loaded.warnings[0].key_path == "rdzv_lease_s");
  CHECK_THAT(loaded.warnings[0].message, Catch::Contains("has no effect: rdzv_backend is static"));
}

TEST_CASE("rdzv refusals: etcd without endpoint, a bad endpoint, an endpoint without etcd, etcd on a fixed world") {
  TempDir dir;
  auto file = dir.write("job.yaml", std::string(kRdzvElasticJob) + "rdzv_backend: etcd\n");
  std::string text = error_text([&] { load(file); });
  CHECK_THAT(text, Catch::Contains(file + ":4:15: error: rdzv_backend: etcd needs rdzv_endpoint"));
  CHECK_THAT(text, Catch::Contains("host:port[,host:port...]"));
  CHECK_THAT(text, Catch::Contains("set rdzv_endpoint, e.g. 10.0.0.5:2379"));

  text = error_text([&] { load(file, {"rdzv_endpoint=10.0.0.5"}); });
  CHECK_THAT(text, Catch::Contains("error: rdzv_endpoint: \"10.0.0.5\" is not host:port"));
  CHECK_THAT(text, Catch::Contains("--set"));

  auto stray = dir.write("stray.yaml", std::string(kRdzvElasticJob) + "rdzv_endpoint: 10.0.0.5:2379\n");
  text = error_text([&] { load(stray); });
  CHECK_THAT(text, Catch::Contains(stray + ":4:16: error: rdzv_endpoint: is set but rdzv_backend is static"));
  CHECK_THAT(text, Catch::Contains("set rdzv_backend: etcd"));

  // On a fixed world (also what an elastic job's workers load at their round's size): a warning.
  auto fixed = dir.write("fixed.yaml", "num_processes: 2\nrdzv_backend: etcd\nrdzv_endpoint: 127.0.0.1:2379\n");
  auto loaded = load(fixed);
  REQUIRE(loaded.warnings.size() == 1);
  CHECK(loaded.warnings[0].key_path == "rdzv_backend");
  CHECK_THAT(loaded.warnings[0].message, Catch::Contains("has no effect: etcd keeps an elastic job's rendezvous"));
  CHECK_THAT(loaded.warnings[0].hint, Catch::Contains("num_machines: MIN:MAX"));

  text = error_text([&] { load(fixed, {"rdzv_backend=zookeeper"}); });
  CHECK_THAT(text, Catch::Contains("static"));
  CHECK_THAT(text, Catch::Contains("etcd"));
}
