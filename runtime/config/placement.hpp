// Where a job's workers run on this machine: `device: auto` becomes cuda when the
// machine has a CUDA GPU and cpu otherwise; a cuda job's num_processes defaults to one process
// per GPU on every machine (Accelerate's default); a cuda job asking for more processes per
// machine than there are GPUs, or for cuda where there is none, is a configuration error naming
// the key, before anything starts. Pure: the caller counts the GPUs (runtime/launch/gpu_probe.hpp).
// Invariant: after resolve_placement, device is cpu or cuda (never auto), and for cuda with nccl
// every local rank has its own GPU (worker r binds cuda:LOCAL_RANK); with cuda_collectives gloo,
// ranks may share GPUs (worker r binds cuda:(LOCAL_RANK mod GPUs)).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/common/errors.hpp"
#include "runtime/config/job.hpp"

namespace accel::config {

struct GpuCount {
  int count = 0;
  std::string why_none;  // for count 0: "libcuda.so.1 (the NVIDIA driver) is not installed", ...
};

// Updates job.device and (when not set explicitly) num_processes, recording in `sources` how they
// were derived; appends problems to `errors`.
void resolve_placement(JobConfig& job, std::map<std::string, Location>& sources, const GpuCount& gpus,
                       std::vector<Diagnostic>& errors);

}  // namespace accel::config
