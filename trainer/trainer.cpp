#include "trainer/trainer.hpp"

#include <ATen/Parallel.h>
#include <sys/resource.h>


#include <chrono>
#include <cstdlib>
#include <filesystem>

#include <accel/accelerator.hpp>

#include "api/host.hpp"
#include "api/peak_memory.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/common/log.hpp"
#include "runtime/common/progress.hpp"
#include "runtime/config/plan/resolve_plan.hpp"
#include "runtime/tracking/trackers.hpp"
#include "runtime/worker/worker_context.hpp"
#include "trainer/data/dataset.hpp"
#include "trainer/evaluation.hpp"
#include "trainer/fault_communicator.hpp"
#include "trainer/fault_injection.hpp"
#include "trainer/lr_schedule.hpp"
#include "trainer/memory_probe.hpp"
#include "trainer/models/builtin_module.hpp"
#include "trainer/models/builtin_optimizer.hpp"
#include "trainer/models/hf_folder_source.hpp"
#include "trainer/models/model_weights.hpp"
#include "trainer/models/placeholder.hpp"
#include "trainer/models/spec_init_source.hpp"
#include "trainer/run_report.hpp"
#include "trainer/step_metrics.hpp"
#include "trainer/trainer_record.hpp"

namespace accel::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int64_t peak_rss_bytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

// Rank 0 writes FILE, rank r FILE with ".rank<r>" before its extension.
std::string trace_file_for_rank(const std::string& path, int rank) {
  if (rank == 0) return path;
  std::filesystem::path p(path);
  return (p.parent_path() / (p.stem().string() + ".rank" + std::to_string(rank) + p.extension().string())).string();
}

class Trainer {
 public:
  Trainer(worker::WorkerContext& ctx, const TrainerOptions& options)
      : ctx_(ctx),
        job_(ctx.job.job),
        t_(job_.training),
        faults_(ctx.communicator->rank()),
        fault_comm_(faults_.watches_collectives() ? make_fault_communicator(*ctx.communicator, faults_) : nullptr),
        comm_(fault_comm_ ? *fault_comm_ : *ctx.communicator),
        rank_(comm_.rank()),
        world_(comm_.size()),
        device_(comm_.device()),
        options_(options) {}

  void run();

 private:
  void build(progress::Task& setup);
  StepMetrics train_step(int64_t step);
  // The peak the metrics report: allocated GPU memory on a GPU, resident host memory on the CPU.
  int64_t peak_memory_bytes() const { return api::peak_memory_bytes(device_); }
  int64_t num_parameters() const;
  void log(const std::string& line) const {
    if (rank_ == 0) logging::info(line);
  }

  worker::WorkerContext& ctx_;
  const config::JobConfig& job_;
  const config::TrainingSection& t_;
  FaultInjector faults_;
  // In front of the world communicator only when ACCEL_FAULT arms a collective point.
  std::unique_ptr<comm::Communicator> fault_comm_;
  comm::Communicator& comm_;
  int rank_, world_;
  at::Device device_;  // the communicator's: cuda:LOCAL_RANK under device cuda
  TrainerOptions options_;
  // The built-in model as a torch module with accel::Unit<> layers, prepared through the public
  // API like a user's (docs/design/0017): the Accelerator owns the engine.
  std::shared_ptr<BuiltinModule> model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<Dataset> data_;
  std::unique_ptr<Accelerator> acc_;
  PreparedOptimizer* step_optimizer_ = nullptr;
  api::EngineView engine_;  // the engine prepare() built: trace, counters, memory, full weights
  std::string resumed_dir_;  // the checkpoint load_state() read
  // model.from_pretrained: the folder's reader, kept for its byte count (the run report's).
  std::shared_ptr<HfFolderSource> pretrained_;
};

void Trainer::build(progress::Task& setup) {
  worker::apply_thread_count();
  setup.set_stage("building the model");
  // Under strategies that partition parameters the model is never whole on a rank (design 0023):
  // it is built of placeholders on this rank's device and the engine fills each unit's shard from
  // the spec's initializer, or from the slices of training.init_from it needs. Otherwise every rank
  // holds the whole model anyway: it is initialized on the CPU (the spec's generator), then moved
  // to this rank's device.
  // ACCEL_WHOLE_MODEL_INIT=1 (a benchmark switch) builds the model whole on every rank under every
  // strategy, for scripts/bench_scale.py's before/after figures.
  const char* whole = std::getenv("ACCEL_WHOLE_MODEL_INIT");
  const bool sharded_init = plan::resolve_plan(job_, plan::ModelFacts::builtin()).frees_parameters() &&
                            !(whole && std::string(whole) == "1");
  std::shared_ptr<engine::UnitSource> source;
  const std::string& pretrained = job_.model.from_pretrained;
  if (!pretrained.empty()) pretrained_ = std::make_shared<HfFolderSource>(job_.model, pretrained);
  if (sharded_init) {
    {
      PlaceholderScope placeholders(device_);
      model_ = make_builtin_module(job_.model);
    }
    if (pretrained_)
      source = pretrained_;
    else if (t_.init_from.empty())
      source = make_spec_init_source(*model_, job_.model.n_layer, uint64_t(t_.seed));
    else
      source = std::make_shared<WeightsFileSource>(model_->spec_parameters(), t_.init_from);
  } else {
    model_ = make_builtin_module(job_.model);
    model_->initialize(uint64_t(t_.seed));
    if (!t_.init_from.empty()) load_weights_into(model_->spec_parameters(), t_.init_from);
    if (pretrained_) pretrained_->fill_whole(model_->spec_parameters());
    if (!device_.is_cpu()) model_->to(device_);
  }
  log_memory(rank_, world_, "model build");
  setup.advance();
  setup.set_stage("opening the data");
  data_ = make_dataset(job_.data, job_.model.vocab_size, t_.seq_len, uint64_t(t_.seed));
  optimizer_ = make_builtin_optimizer(job_.optimizer, model_->spec_parameters());
  // The Accelerator joins the world the worker joined, through comm_ (the fault injector in front
  // when ACCEL_FAULT arms a collective), with the unit source and the trainer's state record
  // (trainer_record.hpp): its data position, model and loop state.
  api::HostOptions host;
  host.unit_source = source;
  host.record_format = api::RecordFormat{
      kTrainerWriter, [this] { return trainer_record(job_, world_, *data_, nlohmann::json::object()); },
      [this](const std::string& dir, const nlohmann::json& record) {
        check_trainer_record(dir, record, *data_);
        resumed_dir_ = dir;
      },
      [this](int64_t steps_done, bool in_background) {
        faults_.at("checkpoint_write", steps_done - 1);
        if (in_background) faults_.at("checkpoint_background_write", steps_done - 1);
      }};
  setup.advance();
  setup.set_stage(std::string("preparing the ") + config::to_string(job_.backend) + " engine" +
                  (sharded_init ? (pretrained_ ? ", each rank reading its shards of " + pretrained
                                   : t_.init_from.empty() ? ", each rank initializing its shards"
                                                          : ", each rank reading its shards of " + t_.init_from)
                                : ""));
  api::Attached attached = api::attach(ctx_.job, comm_, ctx_.rendezvous.get(), std::move(host));
  acc_ = std::move(attached.accelerator);
  engine_ = std::move(attached.engine);
  step_optimizer_ = &acc_->prepare(*model_, *optimizer_);
  log_memory(rank_, world_, "backend build");
  setup.advance();
}

int64_t Trainer::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, p] : model_->spec_parameters()) n += p.numel();
  return n;
}

StepMetrics Trainer::train_step(int64_t step) {
  auto t0 = Clock::now();
  faults_.begin_step(step);
  const int G = t_.gradient_accumulation_steps;
  at::Tensor loss_sum;  // fp64 on the device: no host sync per micro-step on a GPU
  for (int m = 0; m < G; ++m) {
    acc_->accumulate();
    Batch batch = data_->train_batch(step, m, rank_, world_, t_.micro_batch_size, G);
    // The incoming gradient acc_->backward gives the loss (its fp16 scale over G): the chunked loss
    // forms its gradients at that scale (chunked_cross_entropy.hpp).
    at::Tensor loss = model_->loss(batch.x.to(device_), batch.y.to(device_), t_.loss_chunk_tokens, acc_->loss_scale() / G);
    // Mean over the global batch: micro loss / G here, the average over ranks in the engine.
    acc_->backward(loss);
    const at::Tensor micro = loss.detach().to(at::kDouble);
    loss_sum = loss_sum.defined() ? loss_sum + micro : micro;
  }
  StepMetrics m;
  m.step = step;
  // The step (spec/training.md): the scheduled lr, the pre-clip global norm and clipping, the update.
  // Under fp16 an overflowed step is skipped and the schedule counts applied steps (DeepSpeed's rule).
  m.lr = learning_rate(job_.scheduler, job_.optimizer.lr, step - acc_->skipped_steps(), t_.max_steps);
  set_learning_rate(*optimizer_, m.lr);
  const double loss_scale = acc_->loss_scale();
  m.grad_norm = acc_->clip_grad_norm(t_.max_grad_norm);
  step_optimizer_->step();
  if (job_.mixed_precision == config::MixedPrecision::fp16) {
    m.loss_scale = loss_scale;
    m.skipped = !step_optimizer_->step_was_applied();
  }
  m.loss = comm::all_reduce_value(comm_, loss_sum.item<double>() / G, comm::ReduceOp::Avg);
  m.peak_mem_bytes = int64_t(comm::all_reduce_value(comm_, double(peak_memory_bytes()), comm::ReduceOp::Max));
  m.tokens = int64_t(world_) * t_.micro_batch_size * G * t_.seq_len;
  m.step_time_s = seconds_since(t0);
  m.tokens_per_s = double(m.tokens) / m.step_time_s;
  return m;
}

void Trainer::run() {
  auto t_start = Clock::now();
  // Setup's stages: the model, the data, the engine, the resume (done or not, the last).
  progress::Task setup("setup", rank_ == 0);
  setup.set_total(4, "stages");
  build(setup);
  setup.set_stage("looking for a checkpoint to resume (training.resume)");
  int64_t start = 0;
  if (acc_->load_state()) {  // training.resume
    start = acc_->step();
    log("resumed from " + resumed_dir_ + " (" + std::to_string(start) + " steps done)");
  }
  // Where the wall time goes, beside the steps themselves: the run log's last lines and the report.
  RunTimes times;
  setup.advance();
  setup.finish();
  times.setup_s = seconds_since(t_start);
  const int64_t setup_peak_rss = peak_rss_bytes();  // the resident peak of building model and engine
  log(data_->describe());
  if (!options_.trace_path.empty() && !engine_.start_trace())
    logging::warn("[rank " + std::to_string(rank_) + "] --trace: backend " + engine_.name() +
              " has no per-unit schedule to record");
  log("model " + std::string(config::to_string(job_.model.name)) + ": " + std::to_string(num_parameters()) +
      " parameters; global batch " + std::to_string(world_) + " ranks x " + std::to_string(t_.micro_batch_size) +
      " rows x " + std::to_string(t_.gradient_accumulation_steps) + " micro-steps x " + std::to_string(t_.seq_len) +
      " tokens; " + std::to_string(at::get_num_threads()) + " thread(s) per rank");

  const std::string& out = t_.output_dir;
  std::unique_ptr<MetricsFile> metrics;
  std::unique_ptr<tracking::Trackers> trackers;  // tracking.log_with; the records metrics.jsonl keeps
  if (rank_ == 0) {
    std::filesystem::create_directories(out);
    metrics = std::make_unique<MetricsFile>(out + "/metrics.jsonl", start);
    trackers = std::make_unique<tracking::Trackers>(job_, start);
  }
  if (start >= t_.max_steps) {
    log("nothing to train: the checkpoint already holds " + std::to_string(start) + " of training.max_steps " +
        std::to_string(t_.max_steps) + " steps (set training.resume: never, or another output_dir, to train again)");
    return;
  }

  std::optional<StepMetrics> first, last;
  std::optional<double> last_eval;
  double train_seconds = 0;
  int64_t tokens = 0;
  std::string last_checkpoint;
  std::vector<double> save_times;  // each save_state() on this thread (asynchronous: staging, waiting)
  StepCommCounter step_comm;
  const ProfileWindow window = resolve_profile_window(options_.profile, start, t_.max_steps);
  StepProfiler profiler(window, rank_, device_.is_cuda() ? int(device_.index()) : -1);
  if (!window.dir.empty())
    log("--profile: steps " + std::to_string(window.first) + " to " + std::to_string(window.last) + " into " + window.dir);
  else if (!options_.profile.dir.empty() && rank_ == 0)
    logging::warn("--profile: steps " + std::to_string(options_.profile.first) + " to " +
                  std::to_string(options_.profile.last) + " were done before this run resumed at step " +
                  std::to_string(start + 1) + ": nothing recorded (fix: --profile-steps within " +
                  std::to_string(start + 1) + ":" + std::to_string(t_.max_steps) + ")");
  std::vector<std::pair<std::string, const comm::Communicator*>> counted = {{"world", &comm_}};
  for (const auto& group : engine_.group_communicators()) counted.push_back(group);
  for (int64_t step = start; step < t_.max_steps; ++step) {
    std::vector<comm::CommStats> before;
    for (const auto& [name, c] : counted) before.push_back(c->stats());
    profiler.before_step(step + 1);
    StepMetrics m = train_step(step);
    if (const std::string trace = profiler.after_step(step + 1); !trace.empty() && rank_ == 0)
      log("--profile: wrote " + trace + " (and one per rank beside it)");
    for (size_t i = 0; i < counted.size(); ++i)
      m.comm_bytes += step_comm.add(counted[i].first, counted[i].second->size(), before[i], counted[i].second->stats());
    log_memory(rank_, world_, "step " + std::to_string(step + 1));
    faults_.at("after_step", step);
    train_seconds += m.step_time_s;
    tokens += m.tokens;
    bool final_step = step + 1 == t_.max_steps;
    if (t_.eval_every > 0 && (step + 1) % t_.eval_every == 0) {
      const auto t_eval = Clock::now();
      progress::Task evaluation("evaluation at step " + std::to_string(step + 1), rank_ == 0);
      m.eval_loss = evaluate(*model_, *data_, comm_, t_.micro_batch_size, &evaluation, t_.loss_chunk_tokens);
      evaluation.finish();
      times.evaluation_s += seconds_since(t_eval);
      if (m.eval_loss) last_eval = m.eval_loss;
    }
    if (metrics) metrics->append(m);
    if (trackers) trackers->log(m.step, tracker_scalars(m));
    if ((step + 1) % t_.log_every == 0 || final_step || step == start)
      log(format_step_line(m, t_.max_steps, options_.progress_bar));
    if (!first) first = m;
    last = m;
    if ((final_step && t_.checkpoint_at_end) || (t_.checkpoint_every > 0 && (step + 1) % t_.checkpoint_every == 0)) {
      const auto t_save = Clock::now();
      last_checkpoint = acc_->save_state();
      save_times.push_back(seconds_since(t_save));
      times.checkpoint_s += save_times.back();
      log_memory(rank_, world_, "checkpoint " + std::to_string(step + 1));
    }
  }
  // training.async_checkpoint: the last checkpoint may still be being written; the run is done
  // once it is committed (a failure to write it ends the run here).
  const auto t_wait = Clock::now();
  acc_->wait_for_checkpoint();
  const double final_wait_s = seconds_since(t_wait);
  times.checkpoint_s += final_wait_s;

  if (!options_.trace_path.empty()) engine_.write_trace(trace_file_for_rank(options_.trace_path, rank_));
  std::string weights;
  // The export's own resident peak (the run report's export_peak_rss_bytes) against the steps': the
  // high-water mark restarts here, after the steps' peak is read.
  const int64_t steps_peak_rss = probe_memory().peak_rss_bytes;
  const bool export_peak_measured = restart_peak_rss();
  const int64_t export_start_rss = probe_memory().rss_bytes;
  const auto t_export = Clock::now();
  if (t_.save_weights) {
    // The engine's order (units, then their parameters), the order `accel merge-weights` writes a
    // checkpoint in: the two files of the same state are byte-equal.
    const bool hf = t_.export_format == config::ExportFormat::hf;
    const std::string file = out + (hf ? "/hf" : "/weights.safetensors");
    progress::Task export_task("weights export to " + file, rank_ == 0);
    // Collective; rank 0 writes, one unit gathered, written and freed at a time.
    engine_.export_weights(file, model_->spec_parameters(), &job_.model,
                           {t_.export_format, t_.export_dtype, t_.export_max_shard_size});
    export_task.finish();
    if (rank_ == 0) weights = file;
  }
  times.export_s = seconds_since(t_export);
  const int64_t export_peak_rss = export_peak_measured ? probe_memory().peak_rss_bytes : -1;
  times.training_s = train_seconds;
  times.total_s = seconds_since(t_start);
  nlohmann::json report = make_run_report(rank_, world_, engine_.name(), engine_.memory_report(), step_comm,
                                          t_.max_steps - start, peak_rss_bytes());
  report["time_s"] = times.to_json();
  report["checkpoint_s"] = {{"async", t_.async_checkpoint}, {"saves", save_times}, {"final_wait", final_wait_s},
                            {"async_times", engine_.checkpoint_times()}};
  report["setup_peak_rss_bytes"] = setup_peak_rss;
  // The run's peak before the export (setup, steps, the end's checkpoint), and the export's alone
  // (-1: the kernel kept no separate mark), with the resident size it started from.
  report["peak_rss_before_export_bytes"] = steps_peak_rss;
  report["export_peak_rss_bytes"] = export_peak_rss;
  report["export_start_rss_bytes"] = export_start_rss;
  if (pretrained_) report["pretrained_bytes_read"] = pretrained_->data_bytes_read();
  write_run_report(out, rank_, report);
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "done: %lld steps in %.1f s (%.1f s training), %lld tokens, %.1fk tok/s; loss %.4f -> %.4f%s",
                static_cast<long long>(t_.max_steps - start), seconds_since(t_start), train_seconds,
                static_cast<long long>(tokens), double(tokens) / train_seconds / 1e3, first->loss, last->loss,
                last_eval ? (", eval_loss " + std::to_string(*last_eval)).c_str() : "");
  log(buf);
  log(times.describe());
  log("outputs: " + out + "/metrics.jsonl" + (weights.empty() ? "" : ", " + weights) + ", checkpoint " +
      last_checkpoint);
}

}  // namespace

void run_training(worker::WorkerContext& ctx, const TrainerOptions& options) {
  // ACCEL_LOG_LEVEL (reserved for log verbosity): debug adds per-phase memory lines.
  logging::configure_from_env();
  Trainer(ctx, options).run();
}

}  // namespace accel::train
