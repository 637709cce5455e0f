#include "runtime/config/dump.hpp"

#include <algorithm>
#include <sstream>

#include "runtime/config/schema.hpp"

namespace accel::config {

std::string dump_job(const JobConfig& job, const std::map<std::string, Location>& sources, DumpStyle style) {
  DumpOptions options;
  options.style = style;
  return dump_job(job, sources, options);
}

std::string dump_job(const JobConfig& job, const std::map<std::string, Location>& sources, const DumpOptions& options) {
  const DumpStyle style = options.style;
  // Build the lines first so source comments can be aligned in one column.
  struct Line {
    std::string text, comment;
  };
  std::vector<Line> lines;
  std::string current_section;
  for (const auto& f : schema()) {
    if (!f.alias_of.empty()) continue;
    auto it = sources.find(f.path);
    bool is_explicit = it != sources.end() && it->second.origin != Location::Origin::Default;
    if (style == DumpStyle::ExplicitOnly && !is_explicit) continue;
    // Read from a file the job names (a model folder's config.json): that file derives it again.
    if (style == DumpStyle::ExplicitOnly && it->second.origin == Location::Origin::Derived && !it->second.file.empty())
      continue;
    std::string section = f.section();
    if (std::find(options.omit_sections.begin(), options.omit_sections.end(), section) != options.omit_sections.end())
      continue;
    if (section != current_section) {
      lines.push_back({section + ":", ""});
      current_section = section;
    }
    std::string indent = section.empty() ? "" : "  ";
    std::string comment = style == DumpStyle::WithSources && it != sources.end() ? it->second.str() : "";
    if (auto c = options.comments.find(f.path); c != options.comments.end()) comment = c->second;
    lines.push_back({indent + f.leaf() + ": " + value_to_yaml(f.get(job)), comment});
  }
  size_t width = 0;
  for (const auto& l : lines)
    if (!l.comment.empty()) width = std::max(width, l.text.size());
  std::ostringstream out;
  for (const auto& l : lines) {
    out << l.text;
    if (!l.comment.empty()) out << std::string(width - l.text.size() + 2, ' ') << "# " << l.comment;
    out << "\n";
  }
  return out.str();
}

std::string dump_resolved_job(const LoadedJob& loaded) {
  const auto& job = loaded.job;
  DumpOptions options;
  options.style = DumpStyle::WithSources;
  for (auto b : {Backend::ddp, Backend::deepspeed, Backend::fsdp})
    if (b != job.backend) options.omit_sections.push_back(to_string(b));
  std::ostringstream out;
  out << "# the job as it runs: backend " << to_string(job.backend) << "; blocks of other backends are left out";
  if (!loaded.translation.active) out << "; nothing was translated";
  out << "\n";
  for (const auto& line : describe_translation(loaded.translation)) out << "# " << line << "\n";
  out << dump_job(job, loaded.sources, options);
  return out.str();
}

std::string describe_keys(bool markdown) {
  JobConfig defaults;
  std::ostringstream out;
  if (markdown) {
    out << "| key | type | default | allowed | environment | meaning |\n|---|---|---|---|---|---|\n";
    auto cell = [](std::string text) {  // a | inside a table cell must be escaped
      for (size_t at = text.find('|'); at != std::string::npos; at = text.find('|', at + 2)) text.replace(at, 1, "\\|");
      return text;
    };
    for (const auto& f : schema())
      out << "| `" << f.path << "` | " << f.type_name() << " | `" << value_to_yaml(f.get(defaults)) << "` | "
          << cell(f.allowed_text()) << " | `" << f.env_var() << "` | " << cell(f.doc) << " |\n";
    return out.str();
  }
  for (const auto& f : schema()) {
    out << f.path << "  (" << f.type_name() << ", default " << value_to_yaml(f.get(defaults)) << ")\n";
    if (!f.allowed_text().empty()) out << "    allowed: " << f.allowed_text() << "\n";
    out << "    env:     " << f.env_var() << "\n    " << f.doc << "\n";
  }
  return out.str();
}

}  // namespace accel::config
