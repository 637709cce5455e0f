// Placement of a job's workers on this machine's GPUs or CPU (see the header).
#include "runtime/config/placement.hpp"

namespace accel::config {
namespace {

bool is_explicit(const std::map<std::string, Location>& sources, const std::string& key) {
  auto it = sources.find(key);
  return it != sources.end() && it->second.origin != Location::Origin::Default &&
         it->second.origin != Location::Origin::Derived;
}

Location where(const std::map<std::string, Location>& sources, const std::string& key) {
  auto it = sources.find(key);
  return it == sources.end() ? Location::default_value() : it->second;
}

std::string gpus_text(int n) { return std::to_string(n) + (n == 1 ? " CUDA GPU" : " CUDA GPUs"); }

}  // namespace

void resolve_placement(JobConfig& job, std::map<std::string, Location>& sources, const GpuCount& gpus,
                       std::vector<Diagnostic>& errors) {
  if (job.device == Device::auto_) {
    job.device = gpus.count > 0 ? Device::cuda : Device::cpu;
    sources["device"] = Location::derived(gpus.count > 0 ? "auto: this machine has " + gpus_text(gpus.count)
                                                         : "auto: no CUDA GPU here (" + gpus.why_none + ")");
  } else if (job.device == Device::cuda && gpus.count == 0) {
    errors.push_back(Diagnostic{"device", where(sources, "device"),
                                "cuda, but this machine has no CUDA GPU: " + gpus.why_none, "cuda", "auto, cpu, cuda",
                                "use device: cpu (or auto, which picks the CPU here); on a GPU machine, check "
                                "nvidia-smi and CUDA_VISIBLE_DEVICES"});
    return;
  }
  if (job.device != Device::cuda) return;

  if (!is_explicit(sources, "num_processes")) {
    job.num_processes = gpus.count * job.num_machines;
    sources["num_processes"] = Location::derived("one process per GPU: " + gpus_text(gpus.count) + " x " +
                                                 std::to_string(job.num_machines) + " machine(s)");
    return;
  }
  const int per_machine = job.num_processes / std::max(1, job.num_machines);
  // Host-staged collectives do not care which GPU a rank holds: ranks share them round-robin.
  if (per_machine > gpus.count && job.cuda_collectives == CudaCollectives::nccl)
    errors.push_back(Diagnostic{
        "num_processes", where(sources, "num_processes"),
        "asks for " + std::to_string(per_machine) + " processes per machine on device cuda, but this machine has " +
            gpus_text(gpus.count) + " (each process needs its own GPU: NCCL refuses two ranks on one device)",
        std::to_string(job.num_processes), "1.." + std::to_string(gpus.count * job.num_machines),
        "set num_processes to " + std::to_string(gpus.count * job.num_machines) +
            " or fewer (or leave it out: it defaults to the GPU count), or use device: cpu; to share GPUs "
            "between ranks (testing), set cuda_collectives: gloo"});
}

}  // namespace accel::config
