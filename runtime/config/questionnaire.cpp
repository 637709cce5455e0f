#include "runtime/config/questionnaire.hpp"

#include <functional>
#include <iostream>
#include <sstream>

#include "runtime/common/strings.hpp"
#include "runtime/config/job_builder.hpp"
#include "runtime/config/plan/resolve_plan.hpp"
#include "runtime/config/question.hpp"

namespace accel::config {
namespace {

std::vector<Question> questions() {
  using J = const JobConfig&;
  auto multi_machine = [](J j) { return j.num_machines > 1; };
  auto builtin = [](J j) { return j.program.empty(); };  // the built-in trainer: its model, data, evaluation
  auto new_model = [](J j) { return j.program.empty() && j.model.from_pretrained.empty(); };
  auto data_file = [](J j) { return j.program.empty() && j.data.kind != DataKind::synthetic; };
  auto text_file = [](J j) { return j.program.empty() && j.data.kind == DataKind::text; };
  auto jsonl_file = [](J j) { return j.program.empty() && j.data.kind == DataKind::text && j.data.format == DataFormat::jsonl; };
  auto evaluated = [](J j) { return j.program.empty() && j.training.eval_every > 0; };
  return {
      {"num_machines", "How many machines will the job use?"},
      {"machine_rank", "What is the rank of this machine?", multi_machine},
      {"main_process_ip", "What is the IP address of machine 0 (the rendezvous host)?", multi_machine},
      {"main_process_port", "Which port on machine 0 should the rendezvous use?", multi_machine},
      {"num_processes", "How many processes in total (one per GPU, or CPU ranks)?"},
      {"device", "Which device should workers compute on?"},
      {"backend", "Which backend: ddp (replicated), deepspeed (ZeRO stages) or fsdp (FSDP strategies)?"},
      // then the backend's dialect's strategy questions (insert_dialect_questions)
      {"mixed_precision", "Which mixed precision?"},
      {"model.dtype", "Which dtype are parameters loaded in?"},
      // then the backend's dialect's precision questions
      {"program", "Your own program to run, with its arguments (empty: accel's built-in trainer)?"},
      {"model.from_pretrained", "Start from a Hugging Face model folder (config.json and safetensors: GPT-2, Llama, "
                                "Mistral)? Its path, or none for a new model", builtin, true},
      {"model.name", "Which built-in model?", new_model},
      {"model.n_layer", "How many layers?", new_model},
      {"model.n_head", "How many attention heads?", new_model},
      {"model.n_embd", "How wide is the model (n_embd, a multiple of the heads)?", new_model},
      {"data.kind", "What does it train on: synthetic (random tokens, no file), text (a text or jsonl file) or tokens "
                    "(an llm.c .bin file)?", builtin},
      {"data.path", "Which data file?", data_file},
      {"data.format", "Is the file plain text or jsonl (one JSON object per line)?", text_file},
      {"data.field", "Which field of each jsonl object holds the text?", jsonl_file},
      {"data.tokenizer", "Which Hugging Face tokenizer.json tokenizes it (none: bytes, vocabulary 256)?", text_file, true},
      {"training.eval_every", "Evaluate on held-out data every how many steps (0: never)?", builtin},
      {"data.val_fraction", "Which fraction of the data is held out for evaluation?", evaluated},
      {"training.max_steps", "How many optimizer steps?"},
      {"training.micro_batch_size", "How many sequences per process per micro-step?"},
      {"training.gradient_accumulation_steps", "How many micro-steps per optimizer step (gradient accumulation)?"},
      {"optimizer.lr", "Peak learning rate?"},
      {"training.output_dir", "Where should outputs (metrics, logs, checkpoints) go?"},
  };
}

// After the backend question and the parameters' dtype question (list[at - 1]): the chosen
// backend's dialect asks about its own keys, inserted at `at`.
void insert_dialect_questions(std::vector<Question>& list, size_t at, const JobConfig& job) {
  const std::string& previous = list[at - 1].path;
  if (previous != "backend" && previous != "model.dtype") return;
  const plan::Dialect* dialect = plan::find_dialect(to_string(job.backend));
  if (!dialect) return;
  const auto& extra = previous == "backend" ? dialect->strategy_questions : dialect->precision_questions;
  list.insert(list.begin() + long(at), extra.begin(), extra.end());
}

// "./train --epochs 3" -> ["./train", "--epochs", "3"]: each word a double-quoted YAML scalar.
std::string flow_list(const std::string& words) {
  std::string out = "[";
  std::istringstream in(words);
  for (std::string word; in >> word;) {
    out += out.size() > 1 ? ", \"" : "\"";
    for (char c : word) out += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
    out += "\"";
  }
  return out + "]";
}

}  // namespace

std::vector<std::string> run_questionnaire(std::istream& in, std::ostream& out, const QuestionnaireOptions& options) {
  JobBuilder builder;
  std::vector<std::string> answers;
  bool input_ended = options.use_defaults;
  std::vector<Question> list = questions();
  for (size_t i = 0; i < list.size(); ++i) {
    if (i > 0) insert_dialect_questions(list, i, builder.job());
    const Question q = list[i];  // a copy: the list grows
    if (!q.when(builder.job())) continue;
    const FieldSpec& field = *find_field(q.path);
    Value current = field.get(builder.job());
    // Shown as the user would type it (no YAML quoting); empty means the question needs an answer.
    std::string default_text = std::holds_alternative<std::string>(current) ? std::get<std::string>(current)
                                                                             : value_to_yaml(current);
    std::string allowed = field.allowed_text();
    if (q.optional && default_text.empty()) default_text = "none";
    for (int attempt = 1;; ++attempt) {
      const std::string shown = default_text == "[]" ? "none" : default_text;  // an empty list (no program)
      out << q.prompt << (allowed.empty() ? "" : " (" + allowed + ")")
          << (shown.empty() ? "" : " [" + shown + "]") << ": " << std::flush;
      std::string line;
      if (!input_ended && !std::getline(in, line)) {
        input_ended = true;
        out << "\n(input ended: taking defaults for the remaining questions)\n";
      }
      if (input_ended) line.clear();
      else if (options.echo_answers) out << line << "\n";
      line = trim(line);
      if (line.empty()) line = default_text;
      if (input_ended && options.use_defaults) out << line << "\n";
      if (line.empty()) {
        out << "  this question has no default; please answer it\n";
        if (attempt >= options.max_attempts || input_ended)
          throw UsageError("accel config: no answer for '" + q.path + "', which has no default");
        continue;
      }

      if (q.optional && line == "none") break;  // left unset: nothing to write
      // A list (the program and its arguments) may be typed as words, as on a command line.
      if (field.type == FieldType::StringList && line.front() != '[') line = flow_list(line);
      std::vector<Diagnostic> errors;
      YAML::Node node;
      try {
        node = YAML::Load(line);
      } catch (const YAML::Exception&) {
        node = YAML::Node(line);
      }
      auto value = parse_value(field, node, Location::command_line(q.path + "=" + line), errors);
      if (value) {
        builder.apply({q.path, node, Location::command_line(q.path + "=" + line)}, Layer::CommandLine);
        if (line != "[]") answers.push_back(q.path + "=" + line);  // no program: nothing to write
        break;
      }
      out << "  invalid answer: " << errors.front().message << "; allowed: " << errors.front().allowed
          << (errors.front().hint.empty() ? "" : " (" + errors.front().hint + ")") << "\n";
      if (attempt >= options.max_attempts || input_ended)
        throw UsageError("accel config: no valid answer for '" + q.path + "' after " + std::to_string(attempt) + " attempts");
    }
  }
  return answers;
}

}  // namespace accel::config
