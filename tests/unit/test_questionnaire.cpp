// `accel config`'s questionnaire driven by piped answers: branching by backend, re-asking on an
// invalid answer, defaults on an empty line or at end of input, and the result validates.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/config/dump.hpp"
#include "runtime/config/job_loader.hpp"
#include "runtime/config/questionnaire.hpp"

using namespace accel;
using namespace accel::config;

namespace {

struct Session {
  std::vector<std::string> answers;
  std::string transcript;
};

Session ask(const std::string& input, QuestionnaireOptions options = {}) {
  std::istringstream in(input);
  std::ostringstream out;
  Session s;
  s.answers = run_questionnaire(in, out, options);
  s.transcript = out.str();
  return s;
}

JobConfig resolve(const std::vector<std::string>& answers) {
  LoadOptions o;
  o.set_overrides = answers;
  o.check_paths = false;
  return load_job(o).job;
}

bool has(const std::vector<std::string>& v, const std::string& item) {
  return std::find(v.begin(), v.end(), item) != v.end();
}

}  // namespace

TEST_CASE("a deepspeed zero-3 job from piped answers, with a wrong answer re-asked") {
  // machines, processes, device, backend, zero stage (5 is wrong, then 3), optimizer offload, param offload,
  // precision, dtype, then the job (program, Hugging Face folder, model name and shape, data, evaluation: defaults), ...
  auto s = ask("1\n4\ncpu\ndeepspeed\n5\n3\ncpu\ncpu\nbf16\n\n" "\n\n\n\n\n\n\n\n" "200\n\n\n\nruns/zero3\n");
  CHECK_THAT(s.transcript, Catch::Contains("Which ZeRO stage? (integer in [0, 3]) [2]:"));
  CHECK_THAT(s.transcript, Catch::Contains("Which mixed precision? (no | bf16 | fp16) [no]:"));
  CHECK_THAT(s.transcript, Catch::Contains("invalid answer: value out of range; allowed: integer in [0, 3]"));
  CHECK_THAT(s.transcript, !Catch::Contains("FSDP sharding strategy"));  // only the chosen backend's questions
  auto j = resolve(s.answers);
  CHECK(j.backend == Backend::deepspeed);
  CHECK(j.num_processes == 4);
  CHECK(j.deepspeed.zero_stage == 3);
  CHECK(j.deepspeed.offload_optimizer_device == OffloadDevice::cpu);
  CHECK(j.deepspeed.offload_param_device == OffloadDevice::cpu);
  CHECK(j.mixed_precision == MixedPrecision::bf16);
  CHECK(j.training.max_steps == 200);
  CHECK(j.training.output_dir == "runs/zero3");
}

TEST_CASE("an fsdp job asks the fsdp questions, and the precision mode only for bf16 parameters") {
  auto s = ask("1\n2\nauto\nfsdp\nHYBRID_SHARD\ntrue\nSIZE_BASED_WRAP\n1e6\nBACKWARD_POST\nfalse\nfalse\nbf16\nbf16\nlow\n");
  CHECK_THAT(s.transcript, Catch::Contains("How many parameters per unit at least?"));
  CHECK_THAT(s.transcript, !Catch::Contains("Which layer class is one unit?"));
  CHECK_THAT(s.transcript, Catch::Contains("upcast shards to fp32"));
  // No question for a checkpoint layout: accel's checkpoints are per-rank shards whatever
  // fsdp.state_dict_type says, and an answered default was carried into a switched job.
  CHECK_THAT(s.transcript, !Catch::Contains("checkpoint layout"));
  CHECK_FALSE(has(s.answers, "fsdp.state_dict_type=FULL_STATE_DICT"));
  auto j = resolve(s.answers);
  CHECK(j.backend == Backend::fsdp);
  CHECK(j.fsdp.sharding_strategy == ShardingStrategy::HYBRID_SHARD);
  CHECK(j.fsdp.offload_params);
  CHECK(j.fsdp.min_num_params == 1000000);
  CHECK(j.fsdp.precision_mode == PrecisionMode::low);
  CHECK(j.model.dtype == ParamDtype::bf16);
}

TEST_CASE("multi-machine questions appear only for several machines") {
  auto s = ask("2\n1\n10.1.2.3\n29501\n8\n");
  CHECK(has(s.answers, "machine_rank=1"));
  CHECK(has(s.answers, "main_process_ip=10.1.2.3"));
  CHECK_THAT(s.transcript, Catch::Contains("input ended: taking defaults"));
  auto j = resolve(s.answers);
  CHECK(j.num_machines == 2);
  CHECK(j.num_processes == 8);
  CHECK(j.main_process_port == 29501);
}

TEST_CASE("the defaults flag asks nothing and takes every default") {
  auto s = ask("", QuestionnaireOptions{true, false, 5});
  CHECK(has(s.answers, "backend=ddp"));
  CHECK(resolve(s.answers).backend == Backend::ddp);
}

TEST_CASE("a question without a default needs an answer") {
  // deepspeed stage 2 with nvme optimizer offload: the directory question has no default.
  auto s = ask("1\n1\ncpu\ndeepspeed\n2\nnvme\n\n/tmp/accel-q-nvme\n");
  CHECK_THAT(s.transcript, Catch::Contains("this question has no default; please answer it"));
  CHECK(has(s.answers, "deepspeed.offload_optimizer_nvme_path=/tmp/accel-q-nvme"));
  CHECK_THROWS_WITH(ask("1\n1\ncpu\ndeepspeed\n2\nnvme\n"), Catch::Contains("which has no default"));
}

TEST_CASE("too many invalid answers in a row give up with a usage error") {
  CHECK_THROWS_AS(ask("x\nx\nx\nx\nx\nx\n"), UsageError);
  CHECK_THROWS_WITH(ask("0\n0\n0\n0\n0\n"), Catch::Contains("no valid answer for 'num_machines'"));
}

TEST_CASE("the questionnaire asks what the job runs: the built-in trainer's model, data and evaluation, or a program") {
  // After the precision questions: program (none), no Hugging Face folder, model gpt with 2 layers,
  // 2 heads, width 64, text data from a file (plain text, bytes), evaluation every 10 steps on 5% of it.
  auto trainer = ask("1\n2\ncpu\nddp\nno\nfp32\n\n\ngpt\n2\n2\n64\ntext\ncorpus.txt\n\n\n10\n0.05\n");
  CHECK_THAT(trainer.transcript, Catch::Contains("Which data file?") && Catch::Contains("held out for evaluation"));
  auto j = resolve(trainer.answers);
  CHECK(j.program.empty());
  CHECK(j.model.n_layer == 2);
  CHECK(j.model.n_embd == 64);
  CHECK(j.data.kind == DataKind::text);
  CHECK(j.data.path == "corpus.txt");
  CHECK(j.training.eval_every == 10);
  CHECK(j.data.val_fraction == Approx(0.05));

  // A program typed as words: its path and arguments; no model, data or evaluation questions.
  auto program = ask("1\n2\ncpu\nddp\nno\nfp32\n./my_trainer --epochs 3\n");
  CHECK(has(program.answers, R"(program=["./my_trainer", "--epochs", "3"])"));
  CHECK_THAT(program.transcript, !Catch::Contains("Which built-in model?"));
  CHECK(resolve(program.answers).program == std::vector<std::string>{"./my_trainer", "--epochs", "3"});
}

TEST_CASE("the questionnaire starts from a Hugging Face folder and tokenizes jsonl through a tokenizer.json") {
  // A folder with only config.json: the questionnaire and the job read shapes from it, no weights.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("accel_questionnaire_hf_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 176,
      "vocab_size": 300, "max_position_embeddings": 128, "rope_theta": 500000.0})";
  // After the precision questions: no program, the folder, jsonl text with its field and a tokenizer.
  auto s = ask("1\n2\ncpu\ndeepspeed\n3\nnone\nnone\nno\nfp32\n\n" + dir.string() +
               "\ntext\ncorpus.jsonl\njsonl\nbody\n" + (dir / "tokenizer.json").string() + "\n0\n");
  CHECK_THAT(s.transcript, !Catch::Contains("Which built-in model?") && !Catch::Contains("How many layers?"));
  CHECK_THAT(s.transcript, Catch::Contains("Which field of each jsonl object"));
  auto j = resolve(s.answers);
  CHECK(j.model.name == ModelName::llama);  // from config.json
  CHECK(j.model.n_kv_head == 2);
  CHECK(j.data.format == DataFormat::jsonl);
  CHECK(j.data.field == "body");
  CHECK(j.data.tokenizer == (dir / "tokenizer.json").string());
  // The job written back out names the folder and leaves its shapes to it.
  LoadOptions o;
  o.set_overrides = s.answers;
  o.check_paths = false;
  auto loaded = load_job(o);
  const std::string text = dump_job(loaded.job, loaded.sources, DumpStyle::ExplicitOnly);
  CHECK_THAT(text, Catch::Contains("from_pretrained: ") && !Catch::Contains("n_kv_head") && !Catch::Contains("name: llama"));
  // No folder and bytes: the built-in model questions, no tokenizer written.
  auto plain = ask("1\n2\ncpu\nddp\nno\nfp32\n\nnone\ngpt\n2\n2\n64\ntext\ncorpus.txt\ntext\nnone\n0\n");
  CHECK_THAT(plain.transcript, Catch::Contains("Which built-in model?") && Catch::Contains("tokenizer.json"));
  CHECK(resolve(plain.answers).data.tokenizer.empty());
  fs::remove_all(dir);
}
