// `accel tokenize DATA --tokenizer tokenizer.json`: the token cache a text-data job would build
// (trainer/text/token_cache.hpp), built ahead of time, or each document's ids printed, or the
// tokenizer timed. Torch-free, in the launcher itself.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "runtime/common/errors.hpp"
#include "trainer/data/data_error.hpp"
#include "trainer/text/token_cache.hpp"
#include "trainer/text/tokenizer.hpp"

namespace accel::cli {

namespace {

struct TokenizeOptions {
  std::string data, tokenizer, format = "text", field = "text", bos = "auto", eos = "auto", cache_dir;
  bool print_ids = false, count = false;
};

std::string read_data(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw train::DataError("data file '" + path + "': cannot open it");
  std::string bytes;
  char buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) bytes.append(buf, n);
  std::fclose(f);
  return bytes;
}

// --print-ids: one line per document, its ids separated by spaces (no bos/eos: as tokenizers'
// encode(text, add_special_tokens=False)). --count: the documents, bytes and tokens, and the time
// spent tokenizing (not reading), as one JSON line.
void run_direct(const TokenizeOptions& o, text::DocumentFormat format) {
  text::Tokenizer tokenizer = text::Tokenizer::from_file(o.tokenizer);
  const std::string bytes = read_data(o.data);
  std::vector<uint32_t> ids;
  std::string line;
  int64_t tokens = 0, doc_bytes = 0;
  double seconds = 0;
  const int64_t docs = text::for_each_document(bytes, format, o.field, o.data, [&](std::string_view doc) {
    ids.clear();
    const auto t0 = std::chrono::steady_clock::now();
    tokenizer.encode(doc, ids);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    tokens += static_cast<int64_t>(ids.size());
    doc_bytes += static_cast<int64_t>(doc.size());
    if (!o.print_ids) return;
    line.clear();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) line += ' ';
      line += std::to_string(ids[i]);
    }
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stdout);
  });
  if (o.count)
    std::cout << nlohmann::json{{"documents", docs}, {"bytes", doc_bytes}, {"tokens", tokens}, {"seconds", seconds}}.dump()
              << "\n";
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  auto* cmd = app.add_subcommand(
      "tokenize",
      "Tokenize a text or jsonl file with a Hugging Face tokenizer.json into the token cache a job with\n"
      "data.tokenizer uses (built once, reused by every rank and run), or print each document's ids\n\n"
      "Examples:\n"
      "  accel tokenize corpus.jsonl --format jsonl --tokenizer llama/tokenizer.json   # build the cache\n"
      "  accel tokenize notes.txt --tokenizer gpt2/tokenizer.json --print-ids          # ids, one line per document");
  cmd->add_option("data", o->data, "The text (one document per line) or jsonl file")->required();
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer.json (data.tokenizer)")->required();
  cmd->add_option("--format", o->format, "text or jsonl (data.format)")->capture_default_str()->check(CLI::IsMember({"text", "jsonl"}));
  cmd->add_option("--field", o->field, "The jsonl field holding the text (data.field)")->capture_default_str();
  cmd->add_option("--bos", o->bos, "auto, none or a token (data.bos)")->capture_default_str();
  cmd->add_option("--eos", o->eos, "auto, none or a token (data.eos)")->capture_default_str();
  cmd->add_option("--cache-dir", o->cache_dir, "data.cache_dir (default $XDG_CACHE_HOME/accel/tokens or ~/.cache/accel/tokens)");
  auto* print = cmd->add_flag("--print-ids", o->print_ids, "Print each document's ids (no bos/eos) instead of caching");
  cmd->add_flag("--count", o->count, "Print documents, bytes, tokens and tokenizing seconds as JSON instead of caching")
      ->excludes(print);
  cmd->callback([o] {
    const auto format = o->format == "jsonl" ? text::DocumentFormat::jsonl : text::DocumentFormat::text;
    if (o->print_ids || o->count) return run_direct(*o, format);
    text::TokenCacheRequest request{o->data, format, o->field, o->tokenizer, o->bos, o->eos, o->cache_dir};
    const text::TokenCache cache = text::ensure_token_cache(request);
    std::cout << (cache.built ? "built " : "found ") << cache.path << ": " << cache.tokens << " tokens";
    if (cache.built) std::cout << " from " << cache.documents << " documents";
    std::cout << " (ids below " << cache.id_limit << ")\n";
  });
}

}  // namespace accel::cli
