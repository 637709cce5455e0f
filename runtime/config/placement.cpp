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

// What the CUDA engine does not do yet (issue 15), refused before anything starts rather than run
// as something else: parameter offload.
void refuse_unsupported_on_cuda(const JobConfig& job, const std::map<std::string, Location>& sources,
                                std::vector<Diagnostic>& errors) {
  if (job.backend == Backend::deepspeed && job.deepspeed.offload_param_device != OffloadDevice::none)
    errors.push_back(Diagnostic{"deepspeed.offload_param_device", where(sources, "deepspeed.offload_param_device"),
                                "parameter offload on device cuda is not supported yet",
                                to_string(job.deepspeed.offload_param_device), "none on cuda",
                                "set offload_param_device: none; offload_optimizer_device: cpu or nvme moves the "
                                "fp32 masters and optimizer states off the GPU (the larger part)"});
  if (job.backend == Backend::fsdp && job.fsdp.offload_params)
    errors.push_back(Diagnostic{"fsdp.offload_params", where(sources, "fsdp.offload_params"),
                                "parameter offload on device cuda is not supported yet", "true", "false on cuda",
                                "set fsdp.offload_params: false, or switch to backend: deepspeed with "
                                "offload_optimizer_device: cpu (masters and optimizer states in host memory)"});
}

void place_workers(JobConfig& job, std::map<std::string, Location>& sources, const GpuCount& gpus,
                   std::vector<Diagnostic>& errors);

}  // namespace

void resolve_placement(JobConfig& job, std::map<std::string, Location>& sources, const GpuCount& gpus,
                       std::vector<Diagnostic>& errors) {
  const size_t before = errors.size();
  place_workers(job, sources, gpus, errors);
  if (job.device == Device::cuda && errors.size() == before) refuse_unsupported_on_cuda(job, sources, errors);
}

namespace {

void place_workers(JobConfig& job, std::map<std::string, Location>& sources, const GpuCount& gpus,
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

}  // namespace
}  // namespace accel::config
