// The token cache: a text data file tokenized once, into an llm.c token file (trainer/data/
// token_file.hpp: 1024-byte header, then uint16 tokens, or uint32 ones in llm.c's llama-3 variant
// when the tokenizer has more than 65536 ids) that every rank and every later run memory-maps.
// Layout of the stream: for each document, [bos] ids [eos] (special_tokens.hpp), concatenated.
// Name: <cache_dir>/tokens-<data fnv1a64>-<tokenizer.json fnv1a64>-<settings fnv1a64 32 bits>.bin,
// where settings are the format, field, resolved bos/eos ids and the cache version: any change to
// what the tokens would be is a new name; a finished file is never rewritten. Beside it, .json
// records where it came from (for people; nothing reads it back).
// Built once: the first process takes an exclusive flock on <name>.lock, builds <name>.tmp.<pid>,
// fsyncs it and renames it into place; the others wait on the lock, then find the file. A file
// present under its final name is therefore complete (its header and size are still checked).
// Docs: docs/design/0032-text-data.md.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/config/job.hpp"
#include "trainer/text/text_documents.hpp"

namespace accel::text {

struct TokenCacheRequest {
  std::string data_path;
  DocumentFormat format = DocumentFormat::text;
  std::string field = "text";
  std::string tokenizer_path;
  std::string bos = "auto";
  std::string eos = "auto";
  std::string cache_dir;  // empty: default_cache_dir()
};

// The request a job's data section makes (data.path, format, field, tokenizer, bos, eos, cache_dir):
// the launcher, which builds the cache before any worker starts, and every rank ask alike.
TokenCacheRequest token_cache_request(const config::DataSection& data);

struct TokenCache {
  std::string path;        // the token file
  bool built = false;      // this call tokenized the data (false: found, built earlier or by another process)
  int64_t tokens = 0;
  int64_t documents = 0;   // when built; -1 when found
  uint32_t id_limit = 0;   // one more than the tokenizer's largest id
};

// $XDG_CACHE_HOME/accel/tokens, else $HOME/.cache/accel/tokens.
std::string default_cache_dir();

// Finds or builds the cache of `request`. ConfigError (exit 2) for an unusable tokenizer or bos/eos
// setting; DataError (exit 1) for unreadable or malformed data.
TokenCache ensure_token_cache(const TokenCacheRequest& request);

// FNV-1a 64 over bytes (the key's hashes).
uint64_t fnv1a64_bytes(const void* data, size_t size, uint64_t h = 0xcbf29ce484222325ULL);

}  // namespace accel::text
