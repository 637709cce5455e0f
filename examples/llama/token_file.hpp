// Reads an llm.c token file (a 256 x int32 header: magic 20240520, version 1, the token count; then
// the uint16 tokens) into memory. No torch here, so tests/examples checks its messages cheaply.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

inline std::vector<uint16_t> read_llm_c_tokens(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))  // the usual first run: make_tokens.py has not written it yet
    throw std::runtime_error(path + ": no such file (working directory " +
                             std::filesystem::current_path(ec).string() + "); write it first: python " +
                             "examples/llama/make_tokens.py " + path + " TEXT_FILE... (examples/README.md)");
  if (std::filesystem::is_directory(path, ec))
    throw std::runtime_error(path + ": a directory; give the token file in it");
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw std::runtime_error(path + ": cannot open it: " + std::strerror(errno));
  int32_t header[256] = {};
  if (std::fread(header, sizeof header, 1, f.get()) != 1)
    throw std::runtime_error(path + ": " + std::to_string(std::filesystem::file_size(path, ec)) + " bytes, too " +
                             "short for an llm.c token file (its header alone is 1024 bytes)");
  if (header[0] != 20240520 || header[1] != 1)
    throw std::runtime_error(path + ": not an llm.c token file (magic " + std::to_string(header[0]) + ", version " +
                             std::to_string(header[1]) + "; expected magic 20240520, version 1)");
  if (header[2] <= 0)
    throw std::runtime_error(path + ": the header declares " + std::to_string(header[2]) + " tokens");
  std::vector<uint16_t> tokens(static_cast<size_t>(header[2]));
  if (std::fread(tokens.data(), sizeof(uint16_t), tokens.size(), f.get()) != tokens.size())
    throw std::runtime_error(path + ": shorter than its header's " + std::to_string(header[2]) + " tokens");
  return tokens;
}
