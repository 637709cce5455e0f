// The launcher's list of default keys beside a resolved job (runtime/config/default_keys.hpp): a
// worker that reloads the full resolved job tells the keys the user set from the defaults again.
#include <catch2/catch.hpp>

#include <fstream>

#include "runtime/config/default_keys.hpp"
#include "runtime/config/dump.hpp"
#include "support/load_job_file.hpp"
#include "support/temp_dir.hpp"

using namespace accel;
using namespace accel::config;
using accel::test::TempDir;

namespace {

using accel::test::load_unchecked;

// What `accel launch` writes for its workers: the full job, and the default keys beside it.
std::string write_resolved(TempDir& dir, const LoadedJob& loaded) {
  const std::string path = dir.write("job.resolved.yaml", dump_job(loaded.job, loaded.sources, DumpStyle::Full));
  std::ofstream(default_keys_path(path)) << default_keys_text(loaded);
  return path;
}

}  // namespace

TEST_CASE("a reloaded resolved job knows again which keys kept their default") {
  TempDir dir;
  const auto user = load_unchecked(dir.write("job.yaml", "backend: fsdp\nfsdp:\n  sharding_strategy: SHARD_GRAD_OP\n"),
                         {"training.max_steps=7"});
  REQUIRE_FALSE(user.is_explicit("fsdp.transformer_layer_cls_to_wrap"));
  const std::string resolved = write_resolved(dir, user);

  LoadedJob worker = load_unchecked(resolved);
  CHECK(worker.is_explicit("fsdp.transformer_layer_cls_to_wrap"));  // the full dump sets every key
  restore_default_origins(worker);
  CHECK_FALSE(worker.is_explicit("fsdp.transformer_layer_cls_to_wrap"));
  CHECK_FALSE(worker.is_explicit("training.seed"));
  CHECK(worker.is_explicit("backend"));
  CHECK(worker.is_explicit("fsdp.sharding_strategy"));
  CHECK(worker.is_explicit("training.max_steps"));  // --set on the launcher's command line
  CHECK(worker.job.training.max_steps == 7);
}

TEST_CASE("a key the user set to its default value stays the user's") {
  TempDir dir;
  const auto user = load_unchecked(dir.write("job.yaml", "backend: fsdp\nfsdp:\n  transformer_layer_cls_to_wrap: Block\n"));
  REQUIRE(user.is_explicit("fsdp.transformer_layer_cls_to_wrap"));
  LoadedJob worker = load_unchecked(write_resolved(dir, user));
  restore_default_origins(worker);
  CHECK(worker.is_explicit("fsdp.transformer_layer_cls_to_wrap"));
}

TEST_CASE("without the side file (a job written by hand) every key of the file stays explicit") {
  TempDir dir;
  const auto user = load_unchecked(dir.write("job.yaml", "backend: ddp\n"));
  LoadedJob worker = load_unchecked(dir.write("full.yaml", dump_job(user.job, user.sources, DumpStyle::Full)));
  restore_default_origins(worker);
  CHECK(worker.is_explicit("training.seed"));
}
