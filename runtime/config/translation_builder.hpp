// Internal to the backend translation: the helper the mapping rows (translate_to_fsdp.cpp,
// translate_to_deepspeed.cpp) use to propose target values and to list options with no equivalent.
// Invariants: a proposal is listed when its source was written in the job (or is built-in
// behaviour) or when it changes the target's default; it is applied unless the target key was set
// explicitly; finish() lists every explicit source key that no row accounted for.
#pragma once

#include <map>
#include <set>
#include <string>

#include "runtime/config/backend_translation.hpp"
#include "runtime/config/schema.hpp"

namespace accel::config {

class TranslationBuilder {
 public:
  // Where a proposal comes from: a source key (explicit or at its default) or built-in behaviour.
  struct From {
    std::string key;
    std::string value;
    bool is_default = false;
    bool builtin = false;
  };

  TranslationBuilder(const JobConfig& job, const std::map<std::string, Location>& sources, TranslatedJob& out);

  const JobConfig& in() const { return in_; }                // the job as loaded (source block values)
  const JobConfig& out() const { return out_.job; }          // the result so far (target block)
  bool is_explicit(const std::string& path) const;           // set in the loaded job (not a default)
  std::string text(const std::string& path) const;           // the loaded value as YAML

  From from_key(const std::string& path) const;
  From builtin(const std::string& block, const std::string& behaviour) const;

  // Proposes target = value (a schema key of the target block).
  void translate(const From& from, const std::string& target, const Value& value, const std::string& note = "",
                 bool exact = true);
  // The target backend does this by itself (no key to set): listed, nothing applied.
  void translate_builtin(const From& from, const std::string& behaviour, const std::string& note = "");
  // `key` of the source block has no equivalent; listed only when the job set it.
  void no_equivalent(const std::string& key, const std::string& why);
  // Lists the explicit source keys no row mentioned, so nothing is dropped silently.
  void finish();

 private:
  std::string source_description(const From& from) const;

  const JobConfig& in_;
  const std::map<std::string, Location>& sources_;
  TranslatedJob& out_;
  std::set<std::string> accounted_;
};

// The mapping rows, one function per direction.
void translate_deepspeed_to_fsdp(TranslationBuilder& b);
void translate_fsdp_to_deepspeed(TranslationBuilder& b);

}  // namespace accel::config
