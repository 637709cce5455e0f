// Offload scratch folders (see offload_scratch_dir.hpp).
#include "backends/core/offload_scratch_dir.hpp"

#include <unistd.h>

#include <filesystem>

#include "runtime/common/errors.hpp"

namespace accel::backends {

OffloadScratchDir::OffloadScratchDir(const std::string& parent, const std::string& prefix, int rank,
                                     const std::string& what)
    : path_((std::filesystem::path(parent) /
             (prefix + "_rank" + std::to_string(rank) + "_pid" + std::to_string(::getpid())))
                .string()) {
  std::error_code ec;
  std::filesystem::create_directories(path_, ec);
  if (ec) throw RunError(what + ": cannot create " + path_ + ": " + ec.message());
}

OffloadScratchDir::~OffloadScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace accel::backends
