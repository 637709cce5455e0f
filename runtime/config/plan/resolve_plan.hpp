// From a job to its one resolved plan (resolved_plan.hpp; docs/design/0022, decision 2). The
// rules every dialect shares live here (the compute dtype, fp16's loss scaling, which engine runs
// the plan); each `backend:` dialect (runtime/config/dialects) maps its own block.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/config/job.hpp"
#include "runtime/config/question.hpp"
#include "runtime/config/plan/resolved_plan.hpp"

namespace accel::config {
struct LoadedJob;
class JobChecker;
}

namespace accel::plan {

// What the caller knows about the model the plan is for.
struct ModelFacts {
  // A module prepared through the public API (its class names are the user's, found in the module
  // tree by the caller); false: accel's built-in model, whose layer classes are checked by name.
  bool user_module = false;
  // The module has accel::Unit<> boundaries in its forward (the built-in models always do), which
  // strategies that free parameters between uses and activation checkpointing need.
  bool unit_boundaries = false;

  static ModelFacts builtin() { return {false, true}; }
  static ModelFacts user(bool unit_boundaries) { return {true, unit_boundaries}; }
};

// What a dialect reads. `loaded` (may be null) says which keys the job set explicitly: warnings
// about accepted keys with no effect are given only for those.
struct DialectInput {
  const config::JobConfig& job;
  const ModelFacts& model;
  const config::LoadedJob* loaded = nullptr;
  bool is_explicit(const std::string& key) const;
};

// A `backend:` dialect: its name and the mapping of its block onto the plan. resolve() fills what
// the shared rules leave: the shards, label, estimate row, grouping, prefetch, offload, notes,
// warnings and refusals. check_block: its block's cross-key checks, run by validation for every
// dialect whatever `backend:` names (a block translated from another is checked where it was
// written; docs/design/0005). `accel config` asks its questions when it is the job's backend:
// the strategy questions after the backend, the precision ones after the model's dtype.
struct Dialect {
  std::string name;
  std::function<void(const DialectInput&, ResolvedPlan&)> resolve;
  std::function<void(const config::JobConfig&, config::JobChecker&)> check_block = {};
  std::vector<config::Question> strategy_questions = {};
  std::vector<config::Question> precision_questions = {};
};

// The job's plan. Never throws for a job that validated: what cannot run is in plan.refusals.
ResolvedPlan resolve_plan(const config::JobConfig& job, const ModelFacts& model = ModelFacts::builtin());
ResolvedPlan resolve_plan(const config::LoadedJob& loaded, const ModelFacts& model = ModelFacts::builtin());

// The registry: one line per dialect (dialects/builtin_dialects.cpp); register_dialect adds one from
// outside (a test's, a plugin's: tests/plan/toy_dialect) and `backend:` accepts its name from then
// on (backend_name.hpp). find_dialect: nullptr for an unknown name.
void register_dialect(Dialect dialect);
const Dialect* find_dialect(const std::string& name);
std::vector<std::string> dialect_names();

}  // namespace accel::plan
