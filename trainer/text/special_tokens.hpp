// The bos and eos tokens accel puts around each document (data.bos, data.eos):
//   auto   tokenizer_config.json beside tokenizer.json names them (bos_token, eos_token: a string or
//          {"content": ...}); without that file, the first added token among the well-known names
//          (bos: <|begin_of_text|>, <s>, <bos>; eos: <|end_of_text|>, </s>, <|endoftext|>, <eos>);
//          none found: no token
//   none   no token
//   TEXT   that token (an added token or a vocabulary entry), or a ConfigError naming the key
// When bos and eos resolve to the same id (GPT-2's <|endoftext|>), only eos is used: one separator
// between documents, as GPT-2 was trained.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "trainer/text/tokenizer_spec.hpp"

namespace accel::text {

struct DocumentBoundaries {
  std::optional<uint32_t> bos;
  std::optional<uint32_t> eos;
};

DocumentBoundaries resolve_boundaries(const TokenizerSpec& spec, const std::string& bos_setting,
                                      const std::string& eos_setting);

}  // namespace accel::text
