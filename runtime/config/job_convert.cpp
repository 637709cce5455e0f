#include "runtime/config/job_convert.hpp"

#include <sstream>

#include "runtime/config/dump.hpp"

namespace accel::config {

std::string converted_job_text(const LoadedJob& loaded, const std::string& original_file) {
  const auto& t = loaded.translation;
  const std::string to = to_string(loaded.job.backend);
  const std::string from = loaded.job.backend == Backend::deepspeed ? "fsdp" : "deepspeed";

  DumpOptions options;
  options.style = DumpStyle::ExplicitOnly;
  options.omit_sections = {from};
  for (const auto& r : t.records) {
    if (!r.applied || r.target_key.find('.') == std::string::npos) continue;
    auto& comment = options.comments[r.target_key];
    comment += (comment.empty() ? "from " : ", ") + r.source_key + ": " + r.source_value +
               (r.source_is_default ? " (default)" : "") + (r.exact ? "" : " (nearest)");
  }

  std::ostringstream out;
  out << "# accel job converted by `accel config convert --to " << to << "` from " << original_file << "\n";
  if (t.active)
    out << "# The " << from << " block was translated into the " << to
        << " block and left out (docs/design/0005-backend-switch.md).\n";
  else
    out << "# Nothing to translate: the job sets no key of the " << from << " block.\n";
  for (const auto& line : describe_translation(t)) out << "# " << line << "\n";
  out << dump_job(loaded.job, loaded.sources, options);
  return out.str();
}

}  // namespace accel::config
