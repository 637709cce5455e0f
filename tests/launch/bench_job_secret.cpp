// The start-up costs the job secret adds (issue 48, docs/design/0033), per launcher and per worker:
// prints one JSON line of microseconds per operation (docs/bench/job_secret_costs_cpu_2core_loaded.json).
// Run: build/tests/launch/bench_job_secret
#include <chrono>
#include <cstdio>
#include <unistd.h>
#include "runtime/common/job_secret.hpp"
#include "runtime/common/sealed_value.hpp"
#include "runtime/launch/membership_auth.hpp"
#include "runtime/launch/shm_sweep.hpp"
using namespace accel;
using C = std::chrono::steady_clock;
template <class F> double us(F f, int n) {
  auto t = C::now();
  for (int i = 0; i < n; ++i) f();
  return std::chrono::duration<double, std::micro>(C::now() - t).count() / n;
}
int main() {
  const int n = 2000;
  auto s = secret::JobSecret::generate();
  double gen = us([] { (void)secret::JobSecret::generate(); }, n);
  double memfd = us([&] { close(s.to_memfd()); }, n);
  double fd_read = us([&] { (void)secret::JobSecret::from_fd(s.to_memfd()); }, n) - memfd;
  double mac = us([&] { (void)s.mac("accel/0/gloo/shm/segment\n/accel-shm-123-0123456789abcdef0123456789abcdef 1234567890 2"); }, n);
  double seal = us([&] { (void)secret::unseal("k", secret::seal("k", "/accel-shm-1-ab 42 2")); }, n);
  std::string hn = launch::fresh_nonce();
  double hs = us([&] {
    auto nonce = launch::fresh_nonce();
    auto line = launch::launcher_proof_line(s, hn, nonce);
    auto got = launch::check_launcher_proof(s, hn, line.substr(0, line.size() - 1));
    auto proof = launch::host_proof_line(s, hn, *got);
    (void)launch::check_host_proof(s, hn, nonce, proof.substr(0, proof.size() - 1));
  }, n);
  // The launcher's start-up look through /dev/shm for segments of launchers that are gone.
  double sweep = us([] { (void)launch::remove_segments_of_gone_launchers(); }, n);
  std::printf("{\"generate_us\": %.2f, \"memfd_create_seal_us\": %.2f, \"worker_read_memfd_us\": %.2f, \"hmac_us\": %.2f, "
              "\"seal_unseal_us\": %.2f, \"membership_handshake_cpu_us\": %.2f, \"stale_segment_sweep_us\": %.2f}\n",
              gen, memfd, fd_read, mac, seal, hs, sweep);
}
