// The resolved plan (runtime/config/plan, docs/design/0022): every field of the plan, and of the
// engine units it makes of a model, for a matrix of jobs across the three dialects, against a
// golden table (golden_plans.txt). The table was written from the per-dialect code the plan
// replaced and checked field by field against it on 20,000 random jobs before that code went, so a
// difference here is a change of what some job runs. ACCEL_UPDATE_GOLDEN=1 rewrites the table after
// a deliberate change (review its diff). Plus the rules that hold for every job.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "runtime/config/plan/engine_units.hpp"
#include "runtime/config/plan/resolve_plan.hpp"

using namespace accel;
using namespace accel::config;

namespace {

std::string dump_groups(const plan::UnitGroups& groups) {
  std::string s;
  for (const auto& g : groups) {
    s += s.empty() ? "[" : " [";
    for (size_t i = 0; i < g.size(); ++i) s += (i ? "," : "") + std::to_string(g[i]);
    s += "]";
  }
  return s;
}

std::string dump(const plan::ResolvedPlan& p) {
  std::ostringstream o;
  o << "dialect " << p.dialect << " | label " << p.label << " | row " << p.estimate_row << "\n";
  if (!p.estimate_note.empty()) o << "estimate note " << p.estimate_note << "\n";
  o << "engine " << plan::to_string(p.engine) << " | shards " << plan::to_string(p.shards) << " | group_size "
    << p.shard_group_size << " | compute " << plan::to_string(p.compute) << " | master " << plan::to_string(p.master)
    << "\n";
  if (p.loss_scaling)
    o << "loss_scaling static " << p.loss_scaling->static_scale << " power " << p.loss_scaling->initial_scale_power
      << " window " << p.loss_scaling->window << " hysteresis " << p.loss_scaling->hysteresis << " min "
      << p.loss_scaling->min_scale << "\n";
  o << "overlap " << p.overlap_comm << " | bucket_mb " << p.bucket_mb << " | reduce " << plan::to_string(p.reduce_bucket)
    << " " << p.reduce_bucket_numel << " | grouping " << plan::to_string(p.grouping) << " " << p.group_numel
    << " | wrap " << to_string(p.wrap) << " [";
  for (const auto& c : p.wrap_classes) o << c << ";";
  o << "] | persistence " << p.persistence_threshold << " | ckpt " << p.activation_checkpointing << "\n";
  const auto& f = p.prefetch;
  o << "prefetch forward " << f.forward << " backward " << int(f.backward) << " units " << f.max_prefetch_units
    << " numel " << f.max_prefetch_numel << " live_units " << f.max_live_units << " live_numel " << f.max_live_numel
    << "\n";
  o << "offload optimizer " << plan::to_string(p.optimizer_states) << " '" << p.optimizer_nvme_dir << "' params "
    << plan::to_string(p.parameters) << " '" << p.param_nvme_dir << "' buffers " << p.nvme_buffer_count << "\n";
  for (const auto& n : p.notes) o << "note " << n << "\n";
  for (const auto& w : p.warnings) o << "warning " << plan::describe(w) << "\n";
  for (const auto& r : p.refusals) o << "refusal " << plan::describe(r) << "\n";
  // A model of 6 units (the root first), wrapped, on 4 ranks; and unwrapped.
  const std::vector<int64_t> numels = {300, 120, 120, 120, 120, 7};
  const plan::EngineUnits wrapped = plan::engine_units(p, numels, true, 4);
  const plan::EngineUnits bare = plan::engine_units(p, numels, false, 4);
  o << "units wrapped " << dump_groups(wrapped.groups) << " bucket " << wrapped.reduce_bucket_numel << " | bare "
    << dump_groups(bare.groups) << " bucket " << bare.reduce_bucket_numel << "\n";
  return o.str();
}

struct Case {
  std::string name;
  std::function<void(JobConfig&)> edit;
  plan::ModelFacts model = plan::ModelFacts::builtin();
};

std::vector<Case> cases() {
  using OD = OffloadDevice;
  std::vector<Case> out;
  auto add = [&](std::string name, std::function<void(JobConfig&)> edit, plan::ModelFacts m = plan::ModelFacts::builtin()) {
    out.push_back({std::move(name), std::move(edit), m});
  };
  add("ddp", [](JobConfig& j) { j.backend = Backend::ddp; });
  add("ddp bf16", [](JobConfig& j) { j.backend = Backend::ddp; j.mixed_precision = MixedPrecision::bf16; });
  add("ddp fp16", [](JobConfig& j) { j.backend = Backend::ddp; j.mixed_precision = MixedPrecision::fp16; });
  add("ddp bucket 1", [](JobConfig& j) { j.backend = Backend::ddp; j.ddp.bucket_cap_mb = 1; });
  for (int stage = 0; stage <= 3; ++stage) {
    auto ds = [stage](JobConfig& j) { j.backend = Backend::deepspeed; j.deepspeed.zero_stage = stage; };
    add("deepspeed " + std::to_string(stage), ds);
    add("deepspeed " + std::to_string(stage) + " bf16", [ds](JobConfig& j) { ds(j); j.mixed_precision = MixedPrecision::bf16; });
    add("deepspeed " + std::to_string(stage) + " fp16 static", [ds](JobConfig& j) {
      ds(j);
      j.mixed_precision = MixedPrecision::fp16;
      j.deepspeed.loss_scale = 128;
    });
    add("deepspeed " + std::to_string(stage) + " small buckets", [ds](JobConfig& j) {
      ds(j);
      j.deepspeed.reduce_bucket_size = 250;
      j.deepspeed.overlap_comm = false;
    });
    add("deepspeed " + std::to_string(stage) + " user module without boundaries", ds, plan::ModelFacts::user(false));
  }
  add("deepspeed 2 cpu offload", [](JobConfig& j) {
    j.backend = Backend::deepspeed;
    j.deepspeed.zero_stage = 2;
    j.deepspeed.offload_optimizer_device = OD::cpu;
  });
  add("deepspeed 0 cpu offload (refused)", [](JobConfig& j) {
    j.backend = Backend::deepspeed;
    j.deepspeed.offload_optimizer_device = OD::cpu;
  });
  add("deepspeed 3 nvme everything", [](JobConfig& j) {
    j.backend = Backend::deepspeed;
    j.deepspeed.zero_stage = 3;
    j.deepspeed.offload_optimizer_device = OD::nvme;
    j.deepspeed.offload_optimizer_nvme_path = "/nvme/opt";
    j.deepspeed.offload_param_device = OD::nvme;
    j.deepspeed.offload_param_nvme_path = "/nvme/param";
    j.deepspeed.buffer_count = 4;
  });
  add("deepspeed 3 param cpu, prefetch and bounds", [](JobConfig& j) {
    j.backend = Backend::deepspeed;
    j.deepspeed.zero_stage = 3;
    j.deepspeed.offload_param_device = OD::cpu;
    j.deepspeed.stage3_prefetch_bucket_size = 0;
    j.deepspeed.stage3_param_persistence_threshold = 150;
    j.deepspeed.stage3_max_live_parameters = 500;
  });
  for (auto s : {ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP, ShardingStrategy::NO_SHARD,
                 ShardingStrategy::HYBRID_SHARD}) {
    auto fs = [s](JobConfig& j) { j.backend = Backend::fsdp; j.fsdp.sharding_strategy = s; };
    const std::string n = "fsdp " + to_string(s);
    add(n, fs);
    add(n + " bf16", [fs](JobConfig& j) { fs(j); j.mixed_precision = MixedPrecision::bf16; });
    add(n + " two machines", [fs](JobConfig& j) { fs(j); j.num_machines = 2; j.num_processes = 4; });
    add(n + " user module without boundaries", fs, plan::ModelFacts::user(false));
    add(n + " user module with boundaries, checkpointing", [fs](JobConfig& j) { fs(j); j.fsdp.activation_checkpointing = true; },
        plan::ModelFacts::user(true));
  }
  auto fsdp = [](JobConfig& j) { j.backend = Backend::fsdp; };
  add("fsdp NO_WRAP", [fsdp](JobConfig& j) { fsdp(j); j.fsdp.auto_wrap_policy = AutoWrapPolicy::NO_WRAP; j.fsdp.min_num_params = 5; });
  add("fsdp SIZE_BASED_WRAP 200", [fsdp](JobConfig& j) {
    fsdp(j);
    j.fsdp.auto_wrap_policy = AutoWrapPolicy::SIZE_BASED_WRAP;
    j.fsdp.min_num_params = 200;
  });
  add("fsdp SIZE_BASED_WRAP 0 (refused)", [fsdp](JobConfig& j) {
    fsdp(j);
    j.fsdp.auto_wrap_policy = AutoWrapPolicy::SIZE_BASED_WRAP;
    j.fsdp.min_num_params = 0;
  });
  add("fsdp wrap class Foo (refused)", [fsdp](JobConfig& j) { fsdp(j); j.fsdp.transformer_layer_cls_to_wrap = "Foo"; });
  add("fsdp wrap class Foo, user module", [fsdp](JobConfig& j) { fsdp(j); j.fsdp.transformer_layer_cls_to_wrap = "Foo, Bar"; },
      plan::ModelFacts::user(true));
  add("fsdp mlp MlpLayer", [fsdp](JobConfig& j) { fsdp(j); j.model.name = ModelName::mlp; j.fsdp.transformer_layer_cls_to_wrap = "MlpLayer"; });
  add("fsdp low precision bf16 model", [fsdp](JobConfig& j) {
    fsdp(j);
    j.model.dtype = ParamDtype::bf16;
    j.fsdp.precision_mode = PrecisionMode::low;
  });
  add("fsdp low precision fp32 model (warned)", [fsdp](JobConfig& j) { fsdp(j); j.fsdp.precision_mode = PrecisionMode::low; });
  add("fsdp prefetch keys", [fsdp](JobConfig& j) {
    fsdp(j);
    j.fsdp.backward_prefetch = BackwardPrefetch::BACKWARD_POST;
    j.fsdp.forward_prefetch = true;
    j.fsdp.limit_all_gathers = false;
  });
  add("fsdp prefetch keys under SHARD_GRAD_OP (warned)", [fsdp](JobConfig& j) {
    fsdp(j);
    j.fsdp.sharding_strategy = ShardingStrategy::SHARD_GRAD_OP;
    j.fsdp.backward_prefetch = BackwardPrefetch::NO_PREFETCH;
    j.fsdp.forward_prefetch = true;
  });
  add("fsdp offload, checkpointing, fp16, inert keys", [fsdp](JobConfig& j) {
    fsdp(j);
    j.fsdp.offload_params = true;
    j.fsdp.activation_checkpointing = true;
    j.mixed_precision = MixedPrecision::fp16;
    j.fsdp.sync_module_states = false;
    j.fsdp.cpu_ram_efficient_loading = true;
    j.fsdp.state_dict_type = StateDictType::SHARDED_STATE_DICT;
  });
  return out;
}

std::string golden_path() { return std::string(ACCEL_PLAN_TEST_DIR) + "/golden_plans.txt"; }

}  // namespace

TEST_CASE("resolved plans of a matrix of jobs equal the golden table", "[plan]") {
  std::string actual;
  for (const auto& c : cases()) {
    JobConfig job;
    job.num_processes = 2;
    c.edit(job);
    actual += "## " + c.name + "\n" + dump(plan::resolve_plan(job, c.model)) + "\n";
  }
  if (const char* update = std::getenv("ACCEL_UPDATE_GOLDEN"); update && std::string(update) == "1") {
    std::ofstream(golden_path()) << actual;
    WARN("rewrote " << golden_path());
  }
  std::ifstream in(golden_path());
  REQUIRE(in.good());
  std::stringstream expected;
  expected << in.rdbuf();
  // Compared case by case, so a failure names the job.
  auto split = [](const std::string& text) {
    std::vector<std::string> parts;
    size_t at = 0;
    while ((at = text.find("## ", at)) != std::string::npos) {
      size_t next = text.find("\n## ", at);
      parts.push_back(text.substr(at, next == std::string::npos ? std::string::npos : next + 1 - at));
      if (next == std::string::npos) break;
      at = next + 1;
    }
    return parts;
  };
  const auto want = split(expected.str()), got = split(actual);
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == want[i]);
}

TEST_CASE("one rule picks the engine: replicated only for nothing sharded in fp32", "[plan]") {
  for (const auto& c : cases()) {
    JobConfig job;
    c.edit(job);
    const plan::ResolvedPlan p = plan::resolve_plan(job, c.model);
    INFO(c.name);
    CHECK((p.engine == plan::Engine::replicated) == (p.shards == plan::Shards::none && p.compute == plan::Dtype::fp32));
    CHECK(p.frees_parameters() == (p.shards == plan::Shards::parameters));
    CHECK(p.loss_scaling.has_value() == (job.mixed_precision == MixedPrecision::fp16));
    CHECK(p.dialect == to_string(job.backend));
  }
}

TEST_CASE("the dialect registry: one entry per backend value, and one added from outside", "[plan]") {
  CHECK(plan::dialect_names() == std::vector<std::string>{"ddp", "deepspeed", "fsdp"});
  CHECK(plan::find_dialect("yafsdp") == nullptr);
  // Replacing a dialect is how a test (or a plugin) changes one: the next resolve uses it.
  const plan::Dialect original = *plan::find_dialect("ddp");
  plan::register_dialect({"ddp", [](const plan::DialectInput&, plan::ResolvedPlan& p) {
                            p.label = "replaced";
                            p.shards = plan::Shards::optimizer;
                          }});
  JobConfig job;
  job.backend = Backend::ddp;
  const plan::ResolvedPlan p = plan::resolve_plan(job);
  plan::register_dialect(original);
  CHECK(p.label == "replaced");
  CHECK(p.engine == plan::Engine::sharded);
  CHECK(plan::resolve_plan(job).label == "ddp");
}
