// The accel executable end to end: exit codes (0 ok, 1 run failed, 2 bad usage/config), error text
// for bad job files, templates, the questionnaire through a pipe, import, show --sources, env,
// estimate-memory.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "support/run_command.hpp"
#include "support/temp_dir.hpp"

using accel::test::run_command;
using accel::test::shell_quote;
namespace fs = std::filesystem;

namespace {

const std::string kAccel = ACCEL_BINARY;
const fs::path kSource = ACCEL_SOURCE_DIR;

// Runs accel with a clean ACCEL_* environment and a private config home.
accel::test::CommandResult run_accel(const std::string& args, const std::string& env = "") {
  return run_command("env -u ACCEL_JOB XDG_CONFIG_HOME=/nonexistent/accel-test " + env + " " + shell_quote(kAccel) +
                     " " + args);
}

// A YAML fixture's "# expect: " comments; a JSON fixture, which has no comments, keeps its
// expectations in FILE.expect as "accel: " lines.
std::vector<std::string> expectations(const fs::path& fixture) {
  bool json = fixture.extension() == ".json";
  const std::string prefix = json ? "accel: " : "# expect: ";
  std::vector<std::string> lines;
  std::ifstream in(json ? fixture.string() + ".expect" : fixture.string());
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) lines.push_back(line.substr(prefix.size()));
  return lines;
}

}  // namespace

TEST_CASE("bad job files exit 2 with the key path, file:line:col and the expected message") {
  std::vector<fs::path> fixtures;
  for (const auto& e : fs::directory_iterator(kSource / "tests/fixtures/bad")) fixtures.push_back(e.path());
  for (const auto& e : fs::directory_iterator(kSource / "tests/fixtures/bad_json"))
    if (e.path().extension() == ".json") fixtures.push_back(e.path());
  std::sort(fixtures.begin(), fixtures.end());
  REQUIRE(fixtures.size() >= 32);
  for (const auto& fixture : fixtures) {
    SECTION(fixture.filename().string()) {
      auto expected = expectations(fixture);
      REQUIRE_FALSE(expected.empty());
      auto r = run_accel("config validate " + shell_quote(fixture.string()));
      INFO(r.output);
      CHECK(r.exit_code == 2);
      CHECK(std::regex_search(r.output, std::regex(":[0-9]+:[0-9]+")));  // a line:col position
      for (const auto& text : expected) CHECK_THAT(r.output, Catch::Contains(text));
    }
  }
}

TEST_CASE("launch validates before spawning: a bad job exits 2 and nothing runs") {
  auto r = run_accel("launch " + shell_quote((kSource / "tests/fixtures/bad/06_offload_param_without_stage3.yaml").string()));
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("parameter offload needs ZeRO stage 3") &&
                           Catch::Contains("1 error in the configuration; nothing was run."));
}

TEST_CASE("every template validates, and the required templates exist") {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(kSource / "config_templates")) {
    names.insert(e.path().stem().string());
    // A fine-tuning template names a model folder the user (or scripts/make_tiny_llama.py) writes
    // first; tests/numerics/test_finetune_template.py writes one and runs it.
    if (e.path().stem().string().rfind("finetune_", 0) == 0) continue;
    SECTION(e.path().filename().string()) {
      auto r = run_accel("config validate " + shell_quote(e.path().string()));
      INFO(r.output);
      CHECK(r.exit_code == 0);
      CHECK_THAT(r.output, Catch::Contains("is a valid accel job"));
    }
  }
  for (const char* required : {"quickstart", "ddp", "deepspeed_zero1", "deepspeed_zero2", "deepspeed_zero3",
                               "deepspeed_zero3_offload_cpu", "deepspeed_zero3_offload_nvme", "fsdp_full_shard",
                               "fsdp_shard_grad_op", "fsdp_hybrid_shard", "fsdp_offload", "finetune_llama"})
    CHECK(names.count(required) == 1);
}

TEST_CASE("help, version and usage errors") {
  auto help = run_accel("--help");
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.output, Catch::Contains("config") && Catch::Contains("launch") && Catch::Contains("env") &&
                              Catch::Contains("estimate-memory"));
  auto version = run_accel("--version");
  CHECK(version.exit_code == 0);
  CHECK(std::regex_search(version.output, std::regex(R"(accel \d+\.\d+\.\d+ \(git )")));
  for (const char* sub : {"config", "config show", "config validate", "config import", "config convert", "config keys",
                          "launch", "env", "estimate-memory", "merge-weights", "report"}) {
    auto r = run_accel(std::string(sub) + " --help");
    INFO(sub);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("Examples:"));
  }
  CHECK(run_accel("").exit_code == 2);
  CHECK(run_accel("frobnicate").exit_code == 2);
  CHECK(run_accel("config validate").exit_code == 2);  // missing FILE
  auto quickstart = shell_quote((kSource / "config_templates/quickstart.yaml").string());
  CHECK(run_accel("config convert " + quickstart).exit_code == 2);  // missing --to
  auto to_ddp = run_accel("config convert " + quickstart + " --to ddp");
  CHECK(to_ddp.exit_code == 2);
  CHECK_THAT(to_ddp.output, Catch::Contains("--to") && Catch::Contains("fsdp"));
  auto no_default = run_accel("launch");
  CHECK(no_default.exit_code == 2);
  CHECK_THAT(no_default.output, Catch::Contains("run `accel config` to write one"));
}

TEST_CASE("accel config driven by piped answers writes a job that validates") {
  accel::test::TempDir dir;
  auto job = (dir.path() / "job.yaml").string();
  auto r = run_command("printf '1\\n2\\ncpu\\nfsdp\\nSHARD_GRAD_OP\\n\\n\\n\\n\\n\\n\\nbf16\\n' | env "
                       "XDG_CONFIG_HOME=/nonexistent " + shell_quote(kAccel) + " config -o " + shell_quote(job));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("wrote " + job));
  CHECK_THAT(r.output, Catch::Contains("Which FSDP sharding strategy? (FULL_SHARD | SHARD_GRAD_OP | NO_SHARD | "
                                       "HYBRID_SHARD) [FULL_SHARD]: SHARD_GRAD_OP"));
  auto v = run_accel("config validate " + shell_quote(job));
  INFO(v.output);
  CHECK(v.exit_code == 0);
  auto shown = run_accel("config show " + shell_quote(job));
  CHECK_THAT(shown.output, Catch::Contains("sharding_strategy: SHARD_GRAD_OP") && Catch::Contains("mixed_precision: bf16"));

  // The default path is the user's config directory.
  auto d = run_command("env XDG_CONFIG_HOME=" + shell_quote(dir.path().string()) + " " + shell_quote(kAccel) +
                       " config --defaults");
  CHECK(d.exit_code == 0);
  CHECK(fs::exists(dir.path() / "accel/default.yaml"));
}

TEST_CASE("config import writes a native job that validates; unknown keys warn by name") {
  accel::test::TempDir dir;
  auto out = (dir.path() / "imported.yaml").string();
  auto r = run_accel("config import " + shell_quote((kSource / "tests/fixtures/import/accelerate_fsdp.yaml").string()) +
                 " -o " + shell_quote(out));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("warning: fsdp_config.fsdp_made_up_option: unknown Accelerate key"));
  CHECK_THAT(r.output, Catch::Contains("warning: gpu_ids: accel does not act on this Accelerate key"));
  auto v = run_accel("config validate " + shell_quote(out));
  CHECK(v.exit_code == 0);
  CHECK_THAT(accel::test::read_file(out), Catch::Contains("backend: fsdp") && Catch::Contains("sharding_strategy: SHARD_GRAD_OP"));
  // Launch and validate take the foreign files directly.
  auto ds = run_accel("launch --dry-run " + shell_quote((kSource / "tests/fixtures/import/ds_config_auto.json").string()));
  INFO(ds.output);
  CHECK(ds.exit_code == 0);
  CHECK_THAT(ds.output, Catch::Contains("(DeepSpeed JSON) is valid: backend deepspeed"));
}

TEST_CASE("config show --sources says where each value came from") {
  // --set before the job path must not swallow it.
  auto r = run_accel("config show --set training.max_steps=7 " +
                         shell_quote((kSource / "config_templates/quickstart.yaml").string()) + " --sources",
                 "ACCEL_TRAINING_SEED=99");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(std::regex_search(r.output, std::regex(R"(max_steps: 7 +# --set training\.max_steps=7)")));
  CHECK(std::regex_search(r.output, std::regex(R"(seed: 99 +# environment ACCEL_TRAINING_SEED)")));
  CHECK(std::regex_search(r.output, std::regex(R"(backend: ddp +# .*quickstart\.yaml:\d+:\d+)")));
  CHECK(std::regex_search(r.output, std::regex(R"(max_restarts: 0 +# default)")));
}

TEST_CASE("accel env --json is machine-readable and names the BLAS") {
  auto r = run_accel("env --json");
  REQUIRE(r.exit_code == 0);
  auto report = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  CHECK(report.contains("blas"));
  auto text = run_accel("env");
  CHECK(text.exit_code == 0);
  CHECK_THAT(text.output, Catch::Contains("BLAS"));
}

TEST_CASE("estimate-memory prints every strategy for each template, the job's own marked") {
  for (const auto& e : fs::directory_iterator(kSource / "config_templates")) {
    if (e.path().stem().string().rfind("finetune_", 0) == 0) continue;  // needs its folder (above)
    SECTION(e.path().filename().string()) {
      auto r = run_accel("estimate-memory " + shell_quote(e.path().string()));
      INFO(r.output);
      CHECK(r.exit_code == 0);
      for (const char* text : {"ddp / zero-0", "zero-1", "zero-2", "zero-3", "NO_SHARD", "SHARD_GRAD_OP", "FULL_SHARD",
                               "ZeRO paper", "* this job"})
        CHECK_THAT(r.output, Catch::Contains(text));
      CHECK(std::regex_search(r.output, std::regex(R"(\n  \* \S)")));  // one row marked
    }
  }
  auto z3 = run_accel("estimate-memory " + shell_quote((kSource / "config_templates/deepspeed_zero3.yaml").string()));
  CHECK_THAT(z3.output, Catch::Contains("  * zero-3") && Catch::Contains("this job: deepspeed zero_stage 3"));
  auto hybrid = run_accel("estimate-memory " + shell_quote((kSource / "config_templates/fsdp_hybrid_shard.yaml").string()));
  CHECK_THAT(hybrid.output, Catch::Contains("HYBRID_SHARD"));
}

TEST_CASE("estimate-memory --json writes exact figures, and bad input exits 2") {
  accel::test::TempDir dir;
  auto out = (dir.path() / "memory.json").string();
  auto r = run_accel("estimate-memory --set backend=fsdp --set num_processes=4 --json " + shell_quote(out));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(accel::test::read_file(out));
  CHECK(j["world"] == 4);
  CHECK(j["configured"]["strategy"] == "FULL_SHARD");
  REQUIRE(j["strategies"].size() == 7);
  for (const auto& s : j["strategies"]) {
    for (const char* key : {"params", "grads", "grad_shard", "master", "optimizer_states", "live_params", "live_grads",
                            "device", "host", "nvme", "zero_paper"})
      CHECK(s["bytes"][key].is_number_integer());
    CHECK(s.contains("name"));
    CHECK(s.contains("shards"));
    CHECK(s.contains("offload"));
    CHECK(s.contains("param_offload"));
  }
  CHECK(j["model"]["parameters"].get<int64_t>() > 0);
  CHECK(j["activations"]["estimated"] == false);

  auto big = run_accel("estimate-memory --params 7e9 --world 8");
  INFO(big.output);
  CHECK(big.exit_code == 0);
  CHECK_THAT(big.output, Catch::Contains("7,000,000,000 parameters") && Catch::Contains("--unit-params"));

  for (const char* args : {"--params -1", "--params 0", "--params 1.5", "--params seven", "--world 0", "--world -2",
                           "--unit-params 10", "--set model.name=resnet", "--set model.n_layer=0"}) {
    auto bad = run_accel(std::string("estimate-memory ") + args);
    INFO(args << "\n" << bad.output);
    CHECK(bad.exit_code == 2);
  }
  auto negative = run_accel("estimate-memory --params -1");
  CHECK_THAT(negative.output, Catch::Contains("--params -1: must be positive"));
}
