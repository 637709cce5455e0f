// accel::Accelerator (include/accel/accelerator.hpp; decisions in docs/design/0015): the job and the
// world from the launcher, a user's module and torch optimizer described as the engines' units and
// parameter groups, and the micro-step state machine around the backend contract (backend.hpp).
#include "accel/accelerator.hpp"

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/nn/modules/batchnorm.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <unordered_map>
#include <unordered_set>

#include "engine/backend.hpp"
#include "runtime/config/plan/resolve_plan.hpp"
#include "runtime/comm/solo_communicator.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/common/log.hpp"
#include "runtime/config/overrides.hpp"
#include "api/accelerator_state.hpp"
#include "api/construction_stash.hpp"
#include "api/current_world.hpp"
#include "api/host.hpp"
#include "api/metrics_log.hpp"
#include "api/peak_memory.hpp"
#include "api/progress_line.hpp"
#include "engine/grad_scaling.hpp"
#include "api/state_io.hpp"
#include "api/prepared_units.hpp"
#include "api/torch_optimizer_groups.hpp"
#include "api/unit_sink.hpp"
#include "engine/format/safetensors.hpp"
#include "engine/optim/adamw_fused.hpp"
#include "runtime/worker/worker_context.hpp"
#include "runtime/common/strings.hpp"
#include "runtime/tracking/trackers.hpp"

namespace accel {
namespace {

// The communicator of the Accelerator constructed last and still alive (current_world.hpp).
std::atomic<comm::Communicator*> current_comm{nullptr};

// One acc.log record, {"step": 3, "loss": 2.5, "lr": 0.001}: "step" first, then the names in map
// order, with ", " and ": " between them and numbers as %.17g (1.0 is written 1; a non-finite value
// is null). test_state_io pins this layout, so only the names and the step go through nlohmann:
// its dump() writes "," and ":", sorts "step" among the names and writes 1.0 as 1.0.
std::string metrics_line(int64_t step, const std::map<std::string, double>& values) {
  std::string line = "{\"step\": " + nlohmann::json(step).dump();
  for (const auto& [name, v] : values) {
    char number[64] = "null";
    if (std::isfinite(v)) std::snprintf(number, sizeof number, "%.17g", v);
    line += ", " + nlohmann::json(name).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + ": " + number;
  }
  return line + "}";
}

}  // namespace

namespace {

void fill_training(const config::JobConfig& job, TrainingConfig& t) {
  t.micro_batch_size = job.training.micro_batch_size;
  t.gradient_accumulation_steps = std::max(1, job.training.gradient_accumulation_steps);
  t.max_steps = job.training.max_steps;
  t.seed = uint64_t(job.training.seed);
  t.output_dir = job.training.output_dir;
}

}  // namespace

void Accelerator::State::join_launched_world() {
  logging::configure_from_env();
  worker::apply_thread_count();
  ctx = std::make_unique<worker::WorkerContext>(worker::start_worker());
  job = ctx->job;
  comm = ctx->communicator.get();
  rendezvous = ctx->rendezvous.get();
}

Accelerator::Accelerator() : state_(std::make_unique<State>()) {
  state_->join_launched_world();
  fill_training(state_->job.job, state_->training);
  current_comm = state_->comm;
}

Accelerator::Accelerator(std::shared_ptr<detail::Host> host) : state_(std::make_unique<State>()) {
  if (!host || !host->job || !host->comm)
    throw RunError("accel: Accelerator(host) is accel's own trainer's (api::attach); construct it with "
                   "Accelerator() or Accelerator(job_file)");
  state_->job = *host->job;
  state_->comm = host->comm;
  state_->rendezvous = host->rendezvous;
  state_->host = std::move(host);
  fill_training(state_->job.job, state_->training);
  current_comm = state_->comm;
}

Accelerator::Accelerator(const std::string& job_file) : state_(std::make_unique<State>()) {
  const char* launched = std::getenv("ACCEL_JOB");
  if (launched && *launched) {
    // Under accel launch the launcher's resolved job (the same file, with overrides) is the one.
    state_->join_launched_world();
  } else {
    config::LoadOptions options;
    options.file = job_file;
    options.environment = config::accel_environment();
    state_->job = config::load_job(options);
    if (state_->job.job.num_processes > 1)
      throw RunError("accel: " + job_file + " asks for " + std::to_string(state_->job.job.num_processes) +
                     " processes: run the program with `accel launch " + job_file + "`");
    state_->single = comm::make_solo_communicator();
    state_->comm = state_->single.get();
  }
  fill_training(state_->job.job, state_->training);
  current_comm = state_->comm;
}

Accelerator::~Accelerator() {
  comm::Communicator* mine = state_->comm;
  current_comm.compare_exchange_strong(mine, nullptr);  // a later Accelerator's stays current
  if (state_->unit_sink) state_->unit_sink->detach();  // the model's wrappers become plain calls
  if (state_->host) state_->host->engine = nullptr;     // its engine goes with it
  if (state_->host) state_->host->checkpoints = nullptr;
}

int Accelerator::rank() const { return state_->comm->rank(); }
torch::Device Accelerator::device() const { return state_->comm->device(); }
int Accelerator::world_size() const { return state_->comm->size(); }
const TrainingConfig& Accelerator::training() const { return state_->training; }

void Accelerator::set_unit_policy(UnitPolicy policy) {
  state_->policy = std::move(policy);
  state_->policy_set = true;
}

namespace {

// libtorch's CPU batch norm wants its input, parameters and running statistics in one dtype. Under
// bf16 the parameters become bf16 while buffers stay fp32 (FSDP keeps BatchNorm in fp32 instead;
// accel's flat buffers hold one dtype), so a plain BatchNorm would fail at its first forward with a
// bare dtype error. accel::SyncBatchNorm computes its statistics itself and runs.
void refuse_plain_batch_norm(torch::nn::Module& model) {
  for (const auto& item : model.named_modules("", /*include_self=*/true)) {
    const torch::nn::Module* m = item.value().get();
    const bool plain = dynamic_cast<const torch::nn::BatchNorm1dImpl*>(m) ||
                       dynamic_cast<const torch::nn::BatchNorm2dImpl*>(m) ||
                       dynamic_cast<const torch::nn::BatchNorm3dImpl*>(m);
    if (plain)
      throw RunError("accel: mixed_precision bf16/fp16: module '" + (item.key().empty() ? std::string("(root)") : item.key()) +
                     "' is a " + m->name() + ", whose CPU kernel needs its running statistics in the parameters' "
                     "dtype, and under bf16 or fp16 the parameters become 16-bit while buffers stay fp32; fix: use "
                     "accel::SyncBatchNorm (the same options and names; it keeps its statistics in fp32), or "
                     "mixed_precision: no");
  }
}


}  // namespace

PreparedOptimizer& Accelerator::prepare(torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
  State& s = *state_;
  if (s.backend) throw RunError("accel: prepare() was called already; prepare one model and optimizer per run");
  const config::JobConfig& job = s.job.job;
  // bf16 and fp16 (docs/design/0017): the parameters become 16-bit views of the engine's buffers,
  // masters stay fp32; fp16 scales the loss (grad_scaling.hpp).
  const bool wrapped = api::has_unit_wrappers(model);  // accel::Unit<> boundaries
  const plan::ResolvedPlan resolved = plan::resolve_plan(job, plan::ModelFacts::user(wrapped));
  const bool casts_inputs = resolved.compute != plan::Dtype::fp32;
  if (casts_inputs) refuse_plain_batch_norm(model);
  s.scaling = std::make_unique<engine::GradScaling>(resolved.loss_scaling);
  if (!resolved.refusals.empty()) throw RunError("accel: " + plan::describe(resolved.refusals.front()));
  s.kind = api::torch_optimizer_kind(optimizer);
  // The optimizer's groups: every trainable parameter of the model in exactly one.
  api::PreparedGroups prepared_groups = api::prepared_groups(s.kind, optimizer, model);
  engine::OptimizerSetup& setup = prepared_groups.setup;
  setup.fused = engine::use_fused_adamw(job.optimizer.fused, !s.comm->device().is_cpu());
  const auto& group_of = prepared_groups.group_of;

  // A model built in an accel::ShardedInit scope may be on the host of a GPU job.
  const bool from_stash = s.stash && s.stash->units_cut() > 0;
  if (s.stash) api::place_on_device(model, s.comm->device());
  if (from_stash && s.host && s.host->options.unit_source)
    throw RunError("accel: prepare(): two sources of starting values (accel::ShardedInit and the host's)");

  // Units by policy (frozen parameters in none).
  const UnitPolicy policy = s.policy_set ? s.policy : api::job_unit_policy(s.job, resolved, model);
  api::PreparedUnits units = api::prepared_units(model, policy, group_of, s.comm->device());
  std::vector<engine::UnitSpec>& specs = units.specs;
  const auto& boundaries = units.boundaries;  // the wrappers that are units
  if (specs.empty()) throw RunError("accel: the prepared module has no parameter that takes gradients");

  // What the engines do not hold starts equal on every rank too: frozen parameters and buffers; and
  // when the engine fills from the stash (it broadcasts nothing then), what the scope kept whole.
  {
    at::NoGradGuard no_grad;
    for (const auto& p : model.named_parameters(/*recurse=*/true))
      if (!p.value().requires_grad() || (from_stash && !s.stash->holds(p.value()))) s.comm->broadcast(p.value(), 0)->wait();
    for (const auto& b : model.named_buffers(/*recurse=*/true))
      if (b.value().defined()) s.comm->broadcast(b.value(), 0)->wait();
  }
  // The engine's plan is this one unless no wrapper became a unit (every parameter of the wrappers
  // frozen): then the units have no boundary, and strategies that need one are refused there.
  const bool bounded = engine::has_unit_boundaries(specs);
  std::shared_ptr<engine::UnitSource> source = s.host ? s.host->options.unit_source : nullptr;
  if (s.loaded_weights) {
    if (source) throw RunError("accel: prepare(): two sources of starting values (load_model() and the host's)");
    source = std::move(s.loaded_weights);
  }
  s.backend = engine::make_backend(bounded == wrapped ? resolved : plan::resolve_plan(job, plan::ModelFacts::user(bounded)),
                                     *s.comm, std::move(specs), setup, from_stash ? s.stash : std::move(source));
  if (from_stash) s.stash->check_consumed();
  s.stash.reset();
  if (s.host) s.host->engine = s.backend.get();
  s.backend->wait_parameters();
  const bool frees_parameters = resolved.frees_parameters();
  // Low precision (casts_inputs): the wrappers cast their floating inputs to bf16 (FSDP's
  // cast_forward_inputs).
  if (wrapped && (frees_parameters || resolved.activation_checkpointing || casts_inputs))
    s.unit_sink = api::attach_unit_sink(boundaries, [this, &s]() -> engine::UnitHooks* {
      if (s.open) return s.hooks;
      if (!at::GradMode::is_enabled()) return s.backend->eval_hooks();  // evaluation: gather, release
      accumulate();  // a forward that will be backpropagated begins the micro-step (accumulate() is optional)
      return s.hooks;
    }, s.backend->name(), /*recompute=*/resolved.activation_checkpointing);
  if (s.unit_sink) s.unit_sink->refuse_second_use(resolved.activation_checkpointing && !frees_parameters);
  s.model = &model;
  s.prepared.reset(new PreparedOptimizer(*this, optimizer));
  s.progress_since = std::chrono::steady_clock::now();
  if (rank() == 0) logging::info("accel: " + s.backend->describe());
  // A float input reaching a bf16 root layer fails in libtorch with a bare dtype mismatch: say
  // once, up front, what the program has to do.
  if (rank() == 0 && casts_inputs && !s.host)
    logging::info(std::string("accel: mixed_precision bf16: the module's parameters are now bf16 (fp32 masters stay "
                              "with the optimizer); ") +
                  (wrapped ? "accel::Unit<> wrappers cast their floating inputs, " : "") +
                  "cast floating inputs of the rest yourself: model->forward(x.to(acc.compute_dtype()))");
  return *s.prepared;
}

std::string Accelerator::describe() const { return state_->backend ? state_->backend->describe() : "not prepared"; }

torch::Dtype Accelerator::compute_dtype() const {
  // Programs call it for every batch (x.to(acc.compute_dtype())): the job's plan is resolved once.
  State& s = *state_;
  if (!s.compute_dtype) s.compute_dtype = engine::compute_dtype(s.job.job);
  return *s.compute_dtype;
}

std::map<std::string, int64_t> Accelerator::memory_report() const {
  std::map<std::string, int64_t> out;
  if (!state_->backend) return out;
  const nlohmann::json report = state_->backend->memory_report();  // items() does not keep a temporary alive
  for (const auto& [part, bytes] : report.items())
    if (bytes.is_number_integer()) out[part] = bytes.get<int64_t>();
  return out;
}

DistributedSampler Accelerator::sampler(size_t size, bool shuffle) const {
  return DistributedSampler(size, world_size(), rank(), shuffle, state_->training.seed);
}

MicroStep Accelerator::accumulate() {
  State& s = *state_;
  engine::Backend& engine = s.engine("accumulate()");
  if (s.open) throw RunError("accel: accumulate() twice without backward() in between");
  if (s.sync_ready)
    throw RunError("accel: the gradients of the last accumulation boundary were not applied; call the prepared "
                   "optimizer's step() after the backward() of every micro-step");
  const int G = s.accumulation();
  const int m = int(s.micro % G);
  s.sync = m == G - 1;
  s.hooks = engine.begin_micro_step(m, s.sync);
  if (s.unit_sink) s.unit_sink->begin_micro_step();
  s.open = true;
  return MicroStep(s.sync);
}

bool Accelerator::sync_gradients() const {
  const State& s = *state_;
  if (s.micro == 0 && !s.open) return s.accumulation() == 1;  // before the first micro-step
  return s.sync;  // the current micro-step's, or the last one's until the next begins
}

void Accelerator::backward(const torch::Tensor& loss) {
  State& s = *state_;
  engine::Backend& engine = s.engine("backward()");
  if (!s.open) accumulate();
  engine.rearm_grads();
  // Each rank's micro loss / G: the backend averages over ranks, so the gradient is that of the
  // mean over the global batch.
  s.scaling->objective(loss, s.accumulation()).backward();
  engine.end_micro_step(s.sync);
  s.open = false;
  ++s.micro;
  if (s.sync) s.sync_ready = true;
}

double Accelerator::clip_grad_norm(double max_norm) {
  State& s = *state_;
  engine::Backend& engine = s.engine("clip_grad_norm()");
  if (!s.sync_ready) return 0.0;
  s.boundary_grad_norm = s.scaling->unscale_and_clip(engine, max_norm);
  return *s.boundary_grad_norm;
}

void PreparedOptimizer::step() { acc_->optimizer_step(*optimizer_, applied_); }

void Accelerator::optimizer_step(torch::optim::Optimizer& optimizer, bool& applied) {
  State& s = *state_;
  engine::Backend& engine = s.engine("step()");
  applied = false;
  if (!s.sync_ready) return;  // an accumulation micro-step: nothing to apply
  const std::vector<engine::GroupHyper> groups =
      api::current_group_hypers(s.kind, optimizer, engine.optimizer_setup().groups.size());
  if (s.io) s.io->before_state_changes();  // an asynchronous save's copies of the state come first
  s.sync_ready = false;
  ++s.steps;  // a skipped step counts too: step() is the loop's position
  s.last_step = {groups.empty() ? 0.0 : groups.front().lr, s.scaling->scale(), false, s.boundary_grad_norm};
  s.boundary_grad_norm.reset();
  if (s.scaling->skip_step(engine)) {  // fp16 overflow: the gradients are dropped, nothing moves
    engine.skip_step();
    s.last_step.skipped = true;
    return;
  }
  engine.optimizer_step(groups);
  engine.wait_parameters();  // the next forward reads parameters without unit boundaries
  applied = true;
}

int64_t Accelerator::step() const { return state_->steps; }
int64_t Accelerator::skipped_steps() const { return state_->scaling ? state_->scaling->skipped_steps() : 0; }
double Accelerator::loss_scale() const { return state_->scaling ? state_->scaling->scale() : 1.0; }

double Accelerator::reduce_mean(double value) {
  return comm::all_reduce_value(*state_->comm, value, comm::ReduceOp::Avg);
}

void Accelerator::wait_for_everyone() { state_->comm->barrier()->wait(); }

void Accelerator::save_model(const std::string& path) {
  State& s = *state_;
  engine::Backend& engine = s.engine("save_model()");
  engine::NamedTensors full = engine.full_parameters();  // collective; complete on rank 0
  if (rank() != 0) return;
  std::unordered_map<std::string, at::Tensor> trained(full.begin(), full.end());
  engine::NamedTensors out;
  std::unordered_set<const void*> seen;
  at::NoGradGuard no_grad;
  for (const auto& p : s.model->named_parameters(/*recurse=*/true)) {
    if (!seen.insert(p.value().unsafeGetTensorImpl()).second) continue;  // a tied parameter, once
    auto it = trained.find(p.key());
    out.emplace_back(p.key(), it != trained.end() ? it->second : p.value().detach().clone());
  }
  for (const auto& b : s.model->named_buffers(/*recurse=*/true))
    if (b.value().defined()) out.emplace_back(b.key(), b.value().detach().clone());
  const std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
  engine::save_safetensors(path, out);
}

void Accelerator::log(int64_t step, const std::map<std::string, double>& values) {
  State& s = *state_;
  if (rank() != 0) return;
  if (!s.metrics) {
    std::filesystem::create_directories(s.training.output_dir);
    // Records carry the step the caller passes (the examples pass step(), a count), so a run
    // resumed after N steps keeps step <= N; a line that is not a JSON object with a step goes.
    s.metrics = std::make_unique<api::MetricsLog>(
        s.training.output_dir + "/metrics.jsonl", s.resumed_steps, api::ResumeKeeps::steps_through,
        [](const std::string& line, int, bool) -> std::optional<int64_t> {
          const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
          if (!record.is_object() || !record.contains("step")) return std::nullopt;
          return record["step"].get<int64_t>();
        });
    // The same records as metrics.jsonl: step <= N after a resume of N steps, none on a fresh start.
    s.trackers = std::make_unique<tracking::Trackers>(s.job.job, s.resumed_steps > 0 ? s.resumed_steps + 1 : 0);
  }
  s.trackers->log(step, {values.begin(), values.end()});  // first: a name MLflow refuses writes nothing
  s.metrics->append(metrics_line(step, values));
}

// Checkpoints: the one checkpoint path, through state_io.cpp.
std::string Accelerator::save_state(const std::string& root) {
  State& s = *state_;
  engine::Backend& engine = s.engine("save_state()");
  return s.checkpoints().save(root, engine, *s.model, s.position());
}

void Accelerator::wait_for_checkpoint() {
  if (state_->io) state_->io->wait_for_saves();
}

bool Accelerator::load_state(const std::string& dir) {
  State& s = *state_;
  engine::Backend& engine = s.engine("load_state()");
  const std::optional<int64_t> steps = s.checkpoints().load(dir, engine, *s.model, s.position());
  if (!steps) return false;
  s.steps = s.resumed_steps = *steps;
  s.scaling->restore(s.checkpoints().loaded_record().value("loss_scaling", nlohmann::json::object()));
  s.micro = *steps * s.accumulation();
  s.sync = true;  // as after the sync micro-step of the step it ended with
  s.progress_since = std::chrono::steady_clock::now();  // the load is not the next step's time
  return true;
}

std::string Accelerator::print_progress(double loss, int64_t tokens) {
  State& s = *state_;
  s.engine("print_progress()");
  if (s.open || s.sync_ready || s.micro % s.accumulation() != 0 || s.steps == 0)
    throw RunError("accel: print_progress() between optimizer steps; call it after the prepared optimizer's step() "
                   "at an accumulation boundary (acc.sync_gradients() was true for the micro-step before)");
  const auto now = std::chrono::steady_clock::now();
  api::StepProgress p;
  p.done = s.steps;
  p.total = s.training.max_steps;
  p.loss = loss;
  p.lr = s.last_step.lr;
  p.grad_norm = s.last_step.grad_norm;
  p.step_time_s = std::chrono::duration<double>(now - s.progress_since).count();
  const double all_tokens = comm::all_reduce_value(*s.comm, double(tokens), comm::ReduceOp::Sum);
  p.peak_mem_bytes = int64_t(
      comm::all_reduce_value(*s.comm, double(api::peak_memory_bytes(s.comm->device())), comm::ReduceOp::Max));
  p.tokens_per_s = p.step_time_s > 0 ? all_tokens / p.step_time_s : 0.0;
  if (s.job.job.mixed_precision == config::MixedPrecision::fp16) {
    p.loss_scale = s.last_step.loss_scale;
    p.skipped = s.last_step.skipped;
  }
  // When the built-in trainer prints its line: every training.log_every steps, the first step this
  // process takes and the last.
  const bool due = s.progress_lines++ == 0 || p.done % s.job.job.training.log_every == 0 || p.done == p.total;
  const std::string line = api::format_progress_line(p, /*progress_bar=*/false);
  if (due && rank() == 0) logging::info(line);
  s.progress_since = std::chrono::steady_clock::now();  // the line's collectives belong to no step
  return line;
}

void Accelerator::register_for_checkpointing(const std::string& name, std::function<std::vector<torch::Tensor>()> save,
                                             std::function<void(const std::vector<torch::Tensor>&)> load) {
  state_->checkpoints().register_object(name, std::move(save), std::move(load));
}

void Accelerator::register_for_checkpointing(const std::string& name, int64_t& value) {
  register_for_checkpointing(
      name, [&value] { return std::vector<torch::Tensor>{at::tensor({value}, at::kLong)}; },
      [&value, name](const std::vector<torch::Tensor>& saved) {
        if (saved.size() != 1 || saved[0].numel() != 1 || saved[0].scalar_type() != at::kLong)
          throw RunError("accel: load_state(): object '" + name + "' was not saved as one integer; register it as "
                         "the program that saved it did");
        value = saved[0].item<int64_t>();
      });
}

namespace detail {

void all_reduce_sum(at::Tensor& tensor) {
  comm::Communicator* comm = current_comm.load();
  if (!comm || comm->size() == 1) return;
  at::NoGradGuard no_grad;
  // The communicator takes dense tensors on its own device: reduce a copy when this is not one.
  const bool direct = tensor.device() == comm->device() && tensor.is_contiguous();
  at::Tensor buffer = direct ? tensor : tensor.to(comm->device()).contiguous();
  comm->all_reduce(buffer, comm::ReduceOp::Sum)->wait();
  if (!direct) tensor.copy_(buffer);
}

}  // namespace detail
}  // namespace accel
