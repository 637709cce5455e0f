// The folder an offload store keeps its files in: <parent>/<prefix>_rank<r>_pid<p>. Created by the
// constructor; removed with its files by the destructor, because the files are scratch (a
// checkpoint holds the real state) and a crashed run's leftovers are told apart by the pid.
#pragma once

#include <string>

namespace accel::backends {

class OffloadScratchDir {
 public:
  // `what` names the feature in the error when the folder cannot be made ("nvme offload").
  OffloadScratchDir(const std::string& parent, const std::string& prefix, int rank, const std::string& what);
  ~OffloadScratchDir();
  OffloadScratchDir(const OffloadScratchDir&) = delete;
  OffloadScratchDir& operator=(const OffloadScratchDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace accel::backends
