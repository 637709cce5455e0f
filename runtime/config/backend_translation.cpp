// When a job is translated between the deepspeed and fsdp blocks, the bookkeeping every mapping row
// shares (listing, explicit-target-wins, source locations), and the printed lines. The rows
// themselves are in translate_to_fsdp.cpp and translate_to_deepspeed.cpp.
#include "runtime/config/backend_translation.hpp"

#include "runtime/config/translation_builder.hpp"

namespace accel::config {
namespace {

std::string block_of(Backend b) { return to_string(b); }

bool is_explicit_in(const std::map<std::string, Location>& sources, const std::string& path) {
  auto it = sources.find(path);
  return it != sources.end() && it->second.origin != Location::Origin::Default;
}

std::string plural(size_t n, const std::string& word, const std::string& words) {
  return std::to_string(n) + " " + (n == 1 ? word : words);
}

}  // namespace

// ---- TranslationBuilder ----------------------------------------------------------------------

TranslationBuilder::TranslationBuilder(const JobConfig& job, const std::map<std::string, Location>& sources,
                                       TranslatedJob& out)
    : in_(job), sources_(sources), out_(out) {}

bool TranslationBuilder::is_explicit(const std::string& path) const { return is_explicit_in(sources_, path); }

std::string TranslationBuilder::text(const std::string& path) const {
  return value_to_yaml(find_field(path)->get(in_));
}

TranslationBuilder::From TranslationBuilder::from_key(const std::string& path) const {
  return {path, text(path), !is_explicit(path), false};
}

TranslationBuilder::From TranslationBuilder::builtin(const std::string& block, const std::string& behaviour) const {
  return {block, behaviour, false, true};
}

std::string TranslationBuilder::source_description(const From& from) const {
  if (from.builtin) return "translated from " + from.key + " (" + from.value + ")";
  std::string where = from.is_default ? "the " + block_of(out_.translation.from) + " default"
                                      : "set at " + sources_.at(from.key).str();
  return "translated from " + from.key + " = " + from.value + ", " + where;
}

void TranslationBuilder::translate(const From& from, const std::string& target, const Value& value,
                                   const std::string& note, bool exact) {
  const FieldSpec* field = find_field(target);
  static const JobConfig defaults;
  bool listed = from.builtin || !from.is_default || !values_equal(value, field->get(defaults));
  if (!listed) return;  // a source default that maps to the target's default: nothing to say or do
  accounted_.insert(from.key);

  TranslationRecord r;
  r.source_key = from.key;
  r.source_value = from.value;
  r.source_is_default = from.is_default;
  r.target_key = target;
  r.target_value = value_to_yaml(value);
  r.note = note;
  r.exact = exact;
  if (is_explicit(target)) {
    r.applied = false;
    r.kept_value = value_to_yaml(field->get(in_));
    r.kept_where = sources_.at(target);
  } else {
    field->set(out_.job, value);
    auto& where = out_.sources[target];
    // Several sources may decide one key (both DeepSpeed offload devices): name them all.
    if (where.origin == Location::Origin::Derived && where.detail.rfind("translated from ", 0) == 0)
      where.detail += "; " + source_description(from).substr(std::string("translated ").size());
    else
      where = Location::derived(source_description(from));
  }
  out_.translation.records.push_back(std::move(r));
}

void TranslationBuilder::translate_builtin(const From& from, const std::string& behaviour, const std::string& note) {
  accounted_.insert(from.key);
  TranslationRecord r;
  r.source_key = from.key;
  r.source_value = from.value;
  r.source_is_default = from.is_default;
  r.target_key = block_of(out_.translation.to);
  r.target_value = behaviour;
  r.note = note;
  out_.translation.records.push_back(std::move(r));
}

void TranslationBuilder::no_equivalent(const std::string& key, const std::string& why) {
  if (!is_explicit(key)) return;
  accounted_.insert(key);
  out_.translation.untranslated.push_back({key, text(key), why});
}

void TranslationBuilder::finish() {
  const std::string section = block_of(out_.translation.from);
  for (const auto& f : schema()) {
    if (!f.alias_of.empty() || f.section() != section || !is_explicit(f.path) || accounted_.count(f.path)) continue;
    out_.translation.untranslated.push_back(
        {f.path, text(f.path), "no counterpart in the " + block_of(out_.translation.to) + " block"});
  }
}

// ---- when, and the whole translation ------------------------------------------------------------

size_t BackendTranslation::applied_count() const {
  size_t n = 0;
  for (const auto& r : records) n += r.applied ? 1 : 0;
  return n;
}

std::optional<Backend> translation_source(const JobConfig&, const std::map<std::string, Location>& sources,
                                          Backend target) {
  if (target != Backend::deepspeed && target != Backend::fsdp) return std::nullopt;  // ddp, a registered dialect
  Backend source = target == Backend::fsdp ? Backend::deepspeed : Backend::fsdp;
  const std::string section = block_of(source), own = block_of(target);
  bool source_set = false, own_complete = true;
  for (const auto& f : schema()) {
    if (!f.alias_of.empty()) continue;
    if (f.section() == section) source_set = source_set || is_explicit_in(sources, f.path);
    if (f.section() == own) own_complete = own_complete && is_explicit_in(sources, f.path);
  }
  // A job whose own block is written in full (a dump, job.resolved.yaml) is already resolved: the
  // other block is just the other backend's settings, unused.
  if (!source_set || own_complete) return std::nullopt;
  return source;
}

TranslatedJob translate_backend(const JobConfig& job, const std::map<std::string, Location>& sources, Backend target) {
  TranslatedJob out{job, sources, {}};
  if (job.backend != target) {
    out.job.backend = target;
    out.sources["backend"] = Location::derived("switched from " + block_of(job.backend));
  }
  auto source = translation_source(job, sources, target);
  if (!source) return out;
  out.translation.active = true;
  out.translation.from = *source;
  out.translation.to = target;
  TranslationBuilder builder(job, sources, out);
  if (target == Backend::fsdp)
    translate_deepspeed_to_fsdp(builder);
  else
    translate_fsdp_to_deepspeed(builder);
  builder.finish();
  return out;
}

// ---- printed form ---------------------------------------------------------------------------------

std::string describe_record(const TranslationRecord& r) {
  std::string line = r.source_key + ": " + r.source_value + (r.source_is_default ? " (default)" : "") + " -> " +
                     r.target_key + ": " + r.target_value;
  std::string note = r.exact ? r.note : "no exact equivalent, nearest" + (r.note.empty() ? "" : ": " + r.note);
  if (!r.applied) {
    if (r.kept_value == r.target_value)
      line += " (" + r.target_key + " is also set explicitly, at " + r.kept_where.str() + ")";
    else
      line += " NOT APPLIED: " + r.target_key + " is set explicitly to " + r.kept_value + " at " + r.kept_where.str() +
              ", which wins";
  }
  if (!note.empty()) line += "  (" + note + ")";
  return line;
}

std::string describe_untranslated(const UntranslatedOption& o) { return o.key + ": " + o.value + "  (" + o.why + ")"; }

std::vector<std::string> describe_translation(const BackendTranslation& t, const std::string& header_prefix) {
  std::vector<std::string> lines;
  if (!t.active) return lines;
  const std::string to = block_of(t.to), from = block_of(t.from);
  if (!t.records.empty()) {
    size_t overridden = 0;
    for (const auto& r : t.records) overridden += !r.applied && r.kept_value != r.target_value ? 1 : 0;
    lines.push_back(header_prefix + "backend " + to + ": " + plural(t.records.size(), "option", "options") +
                    " translated from the " + from + " block" +
                    (overridden ? ", " + std::to_string(overridden) + " of them overridden by explicit " + to + " keys"
                                : "") +
                    ":");
    for (const auto& r : t.records) lines.push_back("  " + describe_record(r));
  }
  if (!t.untranslated.empty()) {
    lines.push_back(header_prefix + "backend " + to + ": " +
                    plural(t.untranslated.size(), from + " option has", from + " options have") + " no " + to +
                    " equivalent and " + (t.untranslated.size() == 1 ? "is" : "are") + " not used:");
    for (const auto& o : t.untranslated) lines.push_back("  " + describe_untranslated(o));
  }
  return lines;
}

}  // namespace accel::config
