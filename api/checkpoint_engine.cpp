#include "api/checkpoint_engine.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>

#include "engine/format/safetensors.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/common/log.hpp"
#include "runtime/common/sealed_value.hpp"
#include "runtime/common/progress.hpp"

namespace accel::api {
namespace fs = std::filesystem;

namespace {

constexpr const char* kRngPrefix = "rng_rank_";

std::string rng_file(int rank) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%05d.safetensors", kRngPrefix, rank);
  return buf;
}

at::Tensor cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_cpu_rng_state(const at::Tensor& state) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// The rendezvous store as a string key-value exchange (store gets wait up to its timeout).
checkpoint::KeyValueExchange store_exchange(const c10::intrusive_ptr<c10d::Store>& store) {
  // Sealed under the job secret: another user who reaches the store cannot feed a rank another
  // group's file list or nonce (runtime/common/sealed_value.hpp).
  return {[store](const std::string& key, const std::string& value) {
            const std::string sealed = secret::seal(key, value);
            store->set(key, std::vector<uint8_t>(sealed.begin(), sealed.end()));
          },
          [store](const std::string& key) {
            std::vector<uint8_t> v = store->get(key);
            return secret::unseal(key, std::string(v.begin(), v.end()));
          }};
}

std::string random_nonce() {
  std::random_device device;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%08x%08x", device(), device());
  return buf;
}

comm::WorldInfo world_of(const comm::Communicator& comm, const comm::Rendezvous* rendezvous) {
  if (rendezvous) return rendezvous->world();
  comm::WorldInfo w;  // one process group on one machine
  w.rank = comm.rank();
  w.world_size = comm.size();
  w.local_rank = comm.rank();
  w.local_world_size = comm.size();
  return w;
}

}  // namespace

CheckpointEngine::CheckpointEngine(const config::LoadedJob& job, comm::Communicator& comm,
                                   comm::Rendezvous* rendezvous, engine::Backend& backend, std::string root,
                                   bool probe_storage)
    : job_(job),
      comm_(comm),
      world_(world_of(comm, rendezvous)),
      backend_(backend),
      root_(std::move(root)),
      writer_(world_.rank == 0),
      rendezvous_(rendezvous),
      async_(job.job.training.async_checkpoint) {
  if (async_ && comm.size() > 1 && !rendezvous)
    throw RunError("training.async_checkpoint: true needs the launcher's rendezvous store (the ranks agree there "
                   "that every rank's files are written before `latest` moves), and this run of " +
                   std::to_string(comm.size()) + " ranks has none; start it with `accel launch`, or set "
                   "training.async_checkpoint: false");
  const int machines = machine_count();
  if (machines <= 1 || !rendezvous || !probe_storage) return;  // one storage, nothing to probe
  kv_ = store_exchange(rendezvous->store());
  key_prefix_ = rendezvous->prefix();
  if (world_.rank == 0) kv_->set(key_prefix_ + "storage/nonce", random_nonce());
  const std::string nonce = kv_->get(key_prefix_ + "storage/nonce");
  storage_ = checkpoint::probe_storage(job.job.training.output_dir, world_.machine_rank, machines, world_.local_rank == 0,
                                 nonce, key_prefix_, *kv_);
  if (world_.rank == 0) logging::info("checkpoint storage: " + storage_.describe());
  if (storage_.shared()) return;
  for (int r = 0; r < world_.world_size; ++r)
    rank_storage_.group_of_rank.push_back(storage_.group_of_machine(world_.machine_of(r)));
  const auto& group = storage_.groups[size_t(storage_.group_of_machine(world_.machine_rank))];
  writer_ = world_.rank == group.front() * world_.local_world_size;
}

std::optional<std::string> CheckpointEngine::latest() const {
  auto latest = checkpoint::find_latest_checkpoint(root_);
  return storage_.shared() ? latest : agree_on_latest(latest);
}

std::optional<std::string> CheckpointEngine::resume_dir() const {
  const std::string& resume = job_.job.training.resume;
  if (resume == "never") return std::nullopt;
  if (resume == "auto") return latest();
  if (!fs::is_directory(resume))
    throw RunError("training.resume: checkpoint directory " + resume +
                   " does not exist; give a step_N directory under <output_dir>/checkpoints, auto, or never");
  return resume;
}

std::optional<std::string> CheckpointEngine::agree_on_latest(const std::optional<std::string>& mine) const {
  // Each machine committed its own `latest`; a crash between two commits leaves them a
  // checkpoint apart. Every rank learns every rank's step (-1: none) and all take the oldest.
  const double step = mine ? double(checkpoint::read_manifest(*mine).step) : -1.0;
  at::Tensor all = at::empty({world_.world_size}, at::kDouble);
  comm_.all_gather(at::tensor({step}, at::kDouble), all)->wait();
  const double lowest = all.min().item<double>(), highest = all.max().item<double>();
  if (highest < 0) return std::nullopt;
  if (lowest < 0) {
    const int64_t without = all.argmin().item<int64_t>();
    throw checkpoint::CheckpointError("machine " + std::to_string(world_.machine_of(int(without))) + " has no checkpoint in " +
                                "its output_dir while another machine's latest is step " +
                                std::to_string(int64_t(highest)) + " (node-local storage); copy that machine's "
                                "checkpoints directory there, or set training.resume: never to start over");
  }
  const std::string dir = root_ + "/" + checkpoint::step_dir_name(int64_t(lowest));
  if (lowest != highest && world_.rank == 0)
    logging::warn("checkpoint storage: the machines' latest checkpoints differ (steps " +
                  std::to_string(int64_t(lowest)) + " to " + std::to_string(int64_t(highest)) +
                  "; a commit was interrupted): resuming every machine from step " + std::to_string(int64_t(lowest)));
  if (!fs::is_directory(dir))
    throw checkpoint::CheckpointError(dir + " does not exist on machine " + std::to_string(world_.machine_rank) +
                                ", but the other machines resume from it; copy it from another machine's output_dir");
  return dir;
}

std::string CheckpointEngine::save(const SaveRequest& request) {
  wait();  // the previous save, when it is still being written: its buffers and `latest` come first
  const int64_t steps_done = request.steps_done;
  const int rank = comm_.rank();
  const std::string staging = root_ + "/." + std::string("tmp.") + checkpoint::step_dir_name(steps_done);
  // Rank 0's files, counted by the safetensors writer; a run's checkpoints are all one size, so
  // the previous one's bytes are this one's total (the first shows bytes so far, without a bar).
  progress::Task task("checkpoint " + checkpoint::step_dir_name(steps_done), rank == 0);
  progress::expect_bytes(last_save_bytes_);
  task.set_stage("writing");
  // A checkpoint that cannot be written (disk full, read-only, permissions) ends the run with what
  // to do; a failing peer (CommError) is reported as itself.
  auto guarded = [&](const auto& write) {
    try {
      write();
    } catch (const comm::CommError&) {
      throw;
    } catch (const std::exception& e) {
      throw write_failure(steps_done, e.what(), staging, world_.machine_rank);
    }
  };
  guarded([&] {
    if (writer_) checkpoint::begin_checkpoint(root_, steps_done);
  });
  comm_.barrier()->wait();  // the staging directories exist before anyone writes into them

  engine::DirectFileSink direct(staging);
  if (async_) {
    if (!staging_) staging_ = std::make_unique<api::CheckpointStaging>(comm_.device());
    staging_->begin(staging);
    async_times_.fence_waits.push_back(0.0);
  }
  engine::TensorFileSink& files = async_ ? static_cast<engine::TensorFileSink&>(*staging_) : direct;
  std::string record_text;
  guarded([&] {
    nlohmann::json record = request.record;
    record["steps_done"] = steps_done;
    record["backend"] = config::to_string(job_.job.backend);
    record["backend_state"] = backend_.save_state(files, rank_storage_);
    record["world_size"] = comm_.size();
    files.write(rng_file(rank), {{"torch_cpu", cpu_rng_state()}});
    if (request.write_files) request.write_files(staging, files);
    record_text = record.dump(2) + "\n";
    if (async_) return;
    if (writer_) checkpoint::write_file_synced(staging + "/" + kStateRecordFile, record_text);
    if (rank == 0 && !job_.file.empty())
      fs::copy_file(job_.file, staging + "/" + kJobRecordFile, fs::copy_options::overwrite_existing);
  });
  if (async_) return start_background_save(steps_done, staging, writer_ ? record_text : "", request.after_files);
  if (request.after_files) request.after_files(false);
  task.set_stage("waiting for every rank's files");
  comm_.barrier()->wait();  // every rank's files are complete before the manifest seals them
  task.set_stage("sealing (hashing the files, the manifest, `latest`)");

  std::string final_dir = root_ + "/" + checkpoint::step_dir_name(steps_done);
  guarded([&] {
    if (writer_)
      final_dir = commit(steps_done, {{"backend", config::to_string(job_.job.backend)}, {"world_size", comm_.size()}});
  });
  comm_.barrier()->wait();  // nobody moves on (or resumes) before `latest` names the new checkpoint
  last_save_bytes_ = task.bytes_written();
  task.finish();
  return final_dir;
}

checkpoint::CheckpointError CheckpointEngine::write_failure(int64_t steps_done, const std::string& what,
                                                      const std::string& staging, int machine) const {
  // The partial directory holds nothing usable and may hold most of a disk: give the space back
  // (best effort; the next checkpoint's begin would remove it too).
  std::error_code ec;
  fs::remove_all(staging, ec);
  std::string previous;
  try {
    if (auto dir = checkpoint::find_latest_checkpoint(root_))
      previous = "the last complete checkpoint, " + *dir + " (" + std::to_string(checkpoint::read_manifest(*dir).step) +
                 " steps), is intact and still `latest`; ";
  } catch (const std::exception&) {  // a damaged `latest` is reported when resuming, not here
  }
  if (previous.empty()) previous = "there is no earlier checkpoint; ";
  return checkpoint::CheckpointError(
      "checkpoint step " + std::to_string(steps_done) + " could not be written on machine " +
      std::to_string(machine) + ": " + what + "\nthe partial checkpoint was removed; " + previous +
      "to go on: free disk space or make " + root_ + " writable (or set training.output_dir to another directory "
      "and copy the checkpoints there), then run the same command again: training.resume: auto continues from "
      "the last complete checkpoint");
}

// Called by each storage group's writer. Node-local: the writers swap their file lists through
// the store, so every machine's manifest lists every machine's files.
std::string CheckpointEngine::commit(int64_t steps_done, const nlohmann::json& extra) {
  if (storage_.shared()) return checkpoint::commit_checkpoint(root_, steps_done, extra);
  const std::string key = key_prefix_ + "checkpoint/" + std::to_string(steps_done) + "/group/";
  const int group = storage_.group_of_machine(world_.machine_rank);
  kv_->set(key + std::to_string(group), checkpoint::files_to_text(checkpoint::hash_staged_files(root_, steps_done)));
  std::vector<std::vector<checkpoint::FileEntry>> files_of_group;
  for (size_t g = 0; g < storage_.groups.size(); ++g)
    files_of_group.push_back(checkpoint::files_from_text(kv_->get(key + std::to_string(g))));
  return checkpoint::commit_node_local(root_, steps_done, extra, checkpoint::merge_group_files(storage_, files_of_group),
                                 storage_.num_machines());
}

nlohmann::json CheckpointEngine::load(const std::string& dir, const std::function<void(const nlohmann::json&)>& check) {
  progress::stage("verifying " + dir);
  checkpoint::Manifest manifest = checkpoint::verify_checkpoint(dir, machine_count() > 1 ? world_.machine_rank : -1);
  progress::stage("restoring the state of " + dir);
  try {
    return load_verified(dir, manifest, check);
  } catch (const RunError& e) {  // a file held by another machine's storage: say where it is
    const std::string note = checkpoint::elsewhere_note(manifest, dir);
    if (note.empty()) throw;
    throw checkpoint::CheckpointError(std::string(e.what()) + "\n" + note);
  }
}

nlohmann::json CheckpointEngine::load_verified(const std::string& dir, const checkpoint::Manifest& manifest,
                                               const std::function<void(const nlohmann::json&)>& check) {
  nlohmann::json record;
  {
    std::ifstream in(dir + "/" + kStateRecordFile);
    record = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  }
  if (record.is_discarded() || !record.is_object() || !record.contains("steps_done"))
    throw checkpoint::CheckpointError(dir + "/" + kStateRecordFile + " is not an accel state record (written by another "
                                "program?)");
  const int64_t steps = record["steps_done"].get<int64_t>();
  if (steps != manifest.step)
    throw checkpoint::CheckpointError(dir + "/" + kStateRecordFile + " says " + std::to_string(steps) +
                                " steps but the manifest says " + std::to_string(manifest.step));
  if (check) check(record);
  backend_.load_state(dir, record.value("backend_state", nlohmann::json::object()));
  restore_generator(dir, manifest, record.value("world_size", 0));
  return record;
}

void CheckpointEngine::restore_generator(const std::string& dir, const checkpoint::Manifest& manifest, int saved_world) {
  // At the same world size rank r continues its own stream. At another, a per-rank stream has no
  // counterpart; when every rank had the same state (the same seed, the same draws: what makes a
  // program's randomness independent of the world size) that state is everyone's.
  std::set<uint64_t> hashes;
  for (const auto& f : manifest.files)
    if (f.name.rfind(kRngPrefix, 0) == 0) hashes.insert(f.fnv1a64);
  std::string file;
  if (saved_world == comm_.size()) {
    file = rng_file(comm_.rank());
  } else if (hashes.size() == 1) {  // any copy of it this machine's storage holds
    for (const auto& f : manifest.files)
      if (f.name.rfind(kRngPrefix, 0) == 0 && fs::exists(dir + "/" + f.name)) {
        file = f.name;
        break;
      }
  } else if (!hashes.empty()) {
    if (comm_.rank() == 0)
      logging::warn("checkpoint " + dir + ": the ranks' CPU generators differed when it was saved at world size " +
                    std::to_string(saved_world) + "; at world size " + std::to_string(comm_.size()) +
                    " no rank's stream has a counterpart, so each rank keeps its generator as it is (reseed after "
                    "loading if your program draws per-rank random numbers)");
    return;
  }
  const std::string path = dir + "/" + file;
  if (file.empty() || !fs::exists(path)) return;  // node-local: held elsewhere; or written before RNG files
  auto tensors = engine::load_safetensors(path);
  if (tensors.size() != 1 || tensors[0].first != "torch_cpu")
    throw checkpoint::CheckpointError(path + " holds no CPU generator state (tensor torch_cpu)");
  set_cpu_rng_state(tensors[0].second);
}

}  // namespace accel::api
