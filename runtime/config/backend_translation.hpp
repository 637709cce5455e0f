// The one-key switch between DeepSpeed and FSDP semantics: a job written for one backend's block runs
// under the other backend with its options translated (Accelerate's "FSDP vs DeepSpeed" mapping,
// docs/design/0005-backend-switch.md).
// When: the job's backend is deepspeed or fsdp, the *other* block (the source) holds at least one
// explicitly set key, and the job's own block (the target) is not written in full (a block with
// every key set, as in a dump or job.resolved.yaml, is already resolved). Then every mapping row
// reads the source block's effective values (explicit or the source backend's defaults, since the
// job was written for them) and fills the target block. Target keys set explicitly win; they are
// never overwritten.
// Invariants: the source block is never modified; every explicitly set source key ends up in a
// record or in the untranslated list (nothing is dropped silently); translated target keys get a
// Derived source naming the source key. Torch-free, pure function of (job, sources, target).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/common/errors.hpp"
#include "runtime/config/job.hpp"

namespace accel::config {

// One source option carried over to the target block.
struct TranslationRecord {
  std::string source_key;          // "deepspeed.zero_stage"; a block name ("deepspeed") for built-in behaviour
  std::string source_value;        // as YAML: "3"; for built-in behaviour, a description
  bool source_is_default = false;  // the source backend's default: the job did not write it
  std::string target_key;          // "fsdp.sharding_strategy"; a block name for built-in behaviour (nothing set)
  std::string target_value;        // as YAML: "FULL_SHARD"
  std::string note;                // what differs, or why; empty for a one-to-one equivalent
  bool exact = true;               // false: no exact equivalent; target_value is the nearest
  bool applied = true;             // false: the target key was set explicitly and its value stays
  std::string kept_value;          // when !applied: the explicit target value
  Location kept_where;             // when !applied: where it was set
};

// A source option that has no equivalent in the target block (it does not affect the run).
struct UntranslatedOption {
  std::string key;
  std::string value;
  std::string why;
};

struct BackendTranslation {
  bool active = false;          // false: nothing was translated, the lists are empty
  Backend from = Backend::deepspeed;  // the dialect of the source block
  Backend to = Backend::fsdp;         // the job's backend (the target block)
  std::vector<TranslationRecord> records;
  std::vector<UntranslatedOption> untranslated;

  size_t applied_count() const;
};

struct TranslatedJob {
  JobConfig job;                             // backend = target, target block translated
  std::map<std::string, Location> sources;   // translated keys: Location::derived("translated from ...")
  BackendTranslation translation;
};

// The block a job running under `target` would be translated from, if any: the other of
// deepspeed/fsdp when it holds an explicitly set key and `target`'s own block is not written in
// full. ddp jobs, and jobs of a dialect registered from outside (it has no block), are never
// translated.
std::optional<Backend> translation_source(const JobConfig& job, const std::map<std::string, Location>& sources,
                                          Backend target);

// Translates `job` for `target` (which becomes job.backend). Never throws for a valid schema value;
// cross-key problems of the result are left to validate_job, which names the translated keys.
TranslatedJob translate_backend(const JobConfig& job, const std::map<std::string, Location>& sources, Backend target);

// The lines `accel launch` prints at start (and `config show --resolved` / `config convert` write
// as comments): a header per list, then one indented line per option. Empty when nothing applies.
//   backend fsdp: 5 options translated from the deepspeed block:
//     deepspeed.zero_stage: 3 -> fsdp.sharding_strategy: FULL_SHARD
//   backend fsdp: 1 deepspeed option has no fsdp equivalent and is not used:
//     deepspeed.pin_memory: true  (FSDP's CPU offload has no pinned-memory switch)
std::vector<std::string> describe_translation(const BackendTranslation& translation,
                                              const std::string& header_prefix = "");
std::string describe_record(const TranslationRecord& record);
std::string describe_untranslated(const UntranslatedOption& option);

}  // namespace accel::config
