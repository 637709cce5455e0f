// `accel env`: every fact a bug report needs (build, libtorch, CUDA/NCCL, machine, BLAS, GPUs,
// the default job file) gathered as JSON, and rendered as "- key: value" text to paste into an issue.
// Torch-free: the libtorch, GPU and BLAS facts come in from accel-worker (torch_report.hpp).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace accel::diag {

// Collects the report around `torch_report` (collect_torch_report()'s JSON, from accel-worker; an
// object {"torch": {"error": why}} when it could not be had); never throws for a missing fact (it
// reads "unknown", null or "not found").
// Layout: accel{version, git_revision, build_type, compiler}, libraries{...versions},
// torch{version, built_with_cuda, cuda_available, cuda_runtime_version|null, nccl_version|null, ...},
// system{os, kernel, cpu_model, logical_cores, usable_cores, memory_*_bytes},
// blas{path, kind, variant, description, openblas_config, openblas_threads, loaded[], warning|null},
// gpus[{index, name, total_memory_bytes, compute_capability}],
// default_job{path, exists, contents}: contents is the file's text, or "not found".
nlohmann::json collect_env_report(const std::string& default_job_path, const nlohmann::json& torch_report);

// Human-readable, paste-able report of collect_env_report()'s JSON; ends with a newline.
std::string render_env_report(const nlohmann::json& report);

}  // namespace accel::diag
