#include "runtime/diag/torch_report.hpp"

#include "runtime/diag/system_facts.hpp"
#include "runtime/diag/torch_facts.hpp"

namespace accel::diag {
namespace {

using nlohmann::json;

json optional_string(const std::optional<std::string>& v) { return v ? json(*v) : json(nullptr); }

json blas_facts(const TorchFacts& torch) {
  BlasInfo blas = detect_blas();
  // PyTorch's own builds link MKL statically: either nothing BLAS-like is visible to the dynamic
  // linker, or the BLAS symbols found are libtorch_cpu's own. Its build settings still say so.
  const bool blas_is_libtorch = blas.path.find("libtorch_cpu") != std::string::npos;
  if ((blas.classification.kind == "not found" || blas_is_libtorch) && torch.blas_info == "mkl")
    blas.classification = {"mkl", "", "Intel MKL (linked into libtorch)"};
  return {{"path", blas.path},
          {"kind", blas.classification.kind},
          {"variant", blas.classification.variant},
          {"description", blas.classification.description},
          {"openblas_config", blas.openblas_config},
          {"openblas_threads", blas.openblas_threads},
          {"loaded", blas.loaded},
          {"warning", blas.warning.empty() ? json(nullptr) : json(blas.warning)}};
}

}  // namespace

json collect_torch_report() {
  const TorchFacts torch = collect_torch_facts();  // first: makes sure libtorch's BLAS is mapped
  json gpus = json::array();
  for (const auto& g : torch.gpus)
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"total_memory_bytes", g.total_memory_bytes},
                    {"compute_capability", g.compute_capability}});
  return {{"torch",
           {{"version", torch.version},
            {"runtime_version", torch.runtime_version},
            {"library_path", torch.library_path},
            {"built_with_cuda", torch.built_with_cuda},
            {"cuda_library_loaded", torch.cuda_library_loaded},
            {"cuda_available", torch.cuda_available},
            {"cuda_device_count", torch.cuda_device_count},
            {"cuda_runtime_version", optional_string(torch.cuda_runtime_version)},
            {"cudnn_version", optional_string(torch.cudnn_version)},
            {"nccl_version", optional_string(torch.nccl_version)},
            {"intra_op_threads", torch.intra_op_threads},
            {"inter_op_threads", torch.inter_op_threads},
            {"blas_info", torch.blas_info},
            {"lapack_info", torch.lapack_info},
            {"mkl", torch.mkl},
            {"openmp", torch.openmp}}},
          {"gpus", gpus},
          {"blas", blas_facts(torch)}};
}

}  // namespace accel::diag
