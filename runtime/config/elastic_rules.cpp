#include "runtime/config/elastic_rules.hpp"

#include "runtime/config/rdzv_endpoint.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

namespace accel::config {

bool is_elastic(const JobConfig& job) { return job.min_machines >= 1 && job.min_machines < job.num_machines; }

int fewest_machines(const JobConfig& job) { return is_elastic(job) ? job.min_machines : job.num_machines; }

std::optional<int> accumulation_at(int accumulation, int num_machines, int machines, ElasticBatch rule) {
  if (accumulation < 1 || num_machines < 1 || machines < 1) return std::nullopt;
  if (rule == ElasticBatch::keep_micro) return accumulation;
  const long long total = static_cast<long long>(accumulation) * num_machines;
  if (total % machines != 0 || total / machines > std::numeric_limits<int>::max()) return std::nullopt;
  return static_cast<int>(total / machines);
}

long long smallest_elastic_accumulation(int min_machines, int max_machines) {
  long long need = 1;  // k divides G x max exactly when k / gcd(k, max) divides G
  for (int k = std::max(1, min_machines); k <= max_machines; ++k) need = std::lcm(need, (long long)(k / std::gcd(k, max_machines)));
  return need;
}

namespace {

// rdzv_backend and rdzv_endpoint (docs/design/0034): etcd needs endpoints that parse and an elastic
// job; endpoints without etcd would silently run without failover, so they are refused too.
void check_rendezvous_backend(const JobConfig& job, JobChecker& c) {
  constexpr const char* kForm = "host:port[,host:port...]";
  const bool etcd = job.rdzv_backend == RdzvBackend::etcd;
  if (!etcd) {
    if (!job.rdzv_endpoint.empty())
      c.error("rdzv_endpoint", "is set but rdzv_backend is static (machine 0 hosts the rendezvous itself)", "",
              "set rdzv_backend: etcd to keep the rendezvous in the etcd cluster at rdzv_endpoint, or remove "
              "rdzv_endpoint; " + c.about("rdzv_backend"));
    if (c.is_set("rdzv_lease_s"))
      c.warning("rdzv_lease_s", "has no effect: rdzv_backend is static (no lease: machine 0 hosts the rendezvous)",
                "set rdzv_backend: etcd with rdzv_endpoint, or remove rdzv_lease_s; " + c.about("rdzv_backend"));
    return;
  }
  if (job.rdzv_endpoint.empty()) {
    c.error("rdzv_backend", "etcd needs rdzv_endpoint, the etcd cluster's client addresses", kForm,
            "set rdzv_endpoint, e.g. 10.0.0.5:2379,10.0.0.6:2379,10.0.0.7:2379, or rdzv_backend: static");
    return;
  }
  // A survivor waits up to two leases to tell a lost host from a live one (docs/design/0034), and
  // gives up on the election after rendezvous_timeout_s: the second must outlast the first.
  if (2 * job.rdzv_lease_s >= job.rendezvous_timeout_s)
    c.error("rdzv_lease_s", std::to_string(job.rdzv_lease_s) + " s: a survivor waits up to two leases (" +
                                std::to_string(2 * job.rdzv_lease_s) + " s) before it elects a host or goes back "
                                "to the one it lost, and gives up after rendezvous_timeout_s (" +
                                std::to_string(job.rendezvous_timeout_s) + " s)",
            "1 .. " + std::to_string(std::max(1, (job.rendezvous_timeout_s - 1) / 2)),
            "lower rdzv_lease_s (5, the default, suits most clusters) or raise rendezvous_timeout_s");
  std::string problem;
  if (!parse_rdzv_endpoints(job.rdzv_endpoint, &problem))
    c.error("rdzv_endpoint", problem, kForm, "write each etcd member's client address, e.g. 10.0.0.5:2379");
  // A warning, as for elastic_batch: an elastic job's workers load the job at their round's fixed world.
  if (!is_elastic(job))
    c.warning("rdzv_backend", "has no effect: etcd keeps an elastic job's rendezvous, and this job's world is fixed",
              "make the job elastic (num_machines: MIN:MAX, e.g. 1:2, with max_restarts) or set rdzv_backend: "
              "static; " + c.about("num_machines"));
}

}  // namespace

void check_elastic(const JobConfig& job, JobChecker& c) {
  check_rendezvous_backend(job, c);
  if (job.min_machines > job.num_machines) {
    c.error("min_machines", "is more than num_machines", "0 .. " + std::to_string(job.num_machines),
            c.about("num_machines") + "; num_machines is the most machines the job runs on (MIN:MAX sets both)");
    return;
  }
  if (!is_elastic(job)) {
    for (const char* key : {"elastic_batch", "elastic_join_window_s", "elastic_peer_timeout_s"})
      if (c.is_set(key))
        c.warning(key, "has no effect: the job's world is fixed", c.about("min_machines") +
                                                                     "; set it below num_machines, or num_machines: "
                                                                     "MIN:MAX, for an elastic job");
    return;
  }
  if (job.elastic_batch == ElasticBatch::keep_global) {
    std::vector<int> refused;
    for (int k = job.min_machines; k < job.num_machines; ++k)
      if (!accumulation_at(job.training.gradient_accumulation_steps, job.num_machines, k, job.elastic_batch))
        refused.push_back(k);
    if (!refused.empty()) {
      std::string counts;
      for (size_t i = 0; i < refused.size(); ++i) counts += (i ? ", " : "") + std::to_string(refused[i]);
      const int g = job.training.gradient_accumulation_steps;
      // At the rule when the user wrote it, else at the range, which the user always wrote.
      const char* key = c.is_set("elastic_batch") ? "elastic_batch" : "min_machines";
      c.error(key,
              std::string(c.is_set("elastic_batch") ? "" : "elastic_batch keep_global (the default) ") +
                  "cannot keep the global batch at " + counts + " of " + std::to_string(job.num_machines) +
                  " machines: gradient_accumulation_steps " + std::to_string(g) + " x " +
                  std::to_string(job.num_machines) + " machines is not a multiple of " + counts,
              "",
              "make training.gradient_accumulation_steps a multiple of " +
                  std::to_string(smallest_elastic_accumulation(job.min_machines, job.num_machines)) +
                  " (then every count from min_machines to num_machines keeps it), raise min_machines, or set "
                  "elastic_batch: keep_micro to keep the micro batch and let the global batch shrink; " +
                  c.about("training.gradient_accumulation_steps"));
    }
  }
  if (job.max_restarts == 0)
    c.warning("min_machines", "with max_restarts 0 a lost machine ends the job: the range only lets it start "
                              "on fewer machines",
              "set max_restarts (each restart round counts one) for the survivors to go on without it");
}

}  // namespace accel::config
