// Writes a job back out as YAML: the full resolved job, only the keys set explicitly, or the
// full job with a comment on each line saying where its value came from (`config show --sources`).
// Every form reads back to the same job (a form that omits a block reads back to the same job
// apart from that block).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/config/job_loader.hpp"

namespace accel::config {

enum class DumpStyle { Full, ExplicitOnly, WithSources };

std::string dump_job(const JobConfig& job, const std::map<std::string, Location>& sources, DumpStyle style);

struct DumpOptions {
  DumpStyle style = DumpStyle::Full;
  std::vector<std::string> omit_sections;       // blocks left out ("deepspeed" once it was translated)
  std::map<std::string, std::string> comments;  // key -> line comment, replacing the source (any style)
};
std::string dump_job(const JobConfig& job, const std::map<std::string, Location>& sources, const DumpOptions& options);

// The job as it runs (`accel config show --resolved`): the blocks of other backends left out, every
// line commented with its source ("derived (translated from deepspeed.zero_stage = 3, ...)"), and
// the translation's lists as a comment header. Reads back as a job with the same effective settings.
std::string dump_resolved_job(const LoadedJob& loaded);

// The documented key table (`accel config keys`): path, type, default, allowed, env var, meaning.
std::string describe_keys(bool markdown);

}  // namespace accel::config
