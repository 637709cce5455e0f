// The part of `accel env` only a process with libtorch loaded can see: libtorch's version and
// build, CUDA, cuDNN, NCCL, the GPUs, and the BLAS libtorch mapped. accel-worker collects it
// (`accel-worker facts` prints it as JSON); the launcher, which never loads torch, merges it into
// the report (env_report.hpp). Collection never throws for a missing fact.
#pragma once

#include <nlohmann/json.hpp>

namespace accel::diag {

// {"torch": {version, runtime_version, library_path, built_with_cuda, ...},
//  "gpus": [{index, name, total_memory_bytes, compute_capability}],
//  "blas": {path, kind, variant, description, openblas_config, openblas_threads, loaded[], warning|null}}
nlohmann::json collect_torch_report();

}  // namespace accel::diag
