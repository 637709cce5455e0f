// GPT-2's byte-level alphabet: each of the 256 byte values written as one printable character
// (bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF as themselves, the other 68 as U+0100 onwards, in
// byte order), which is how byte-level BPE vocabularies and merges are spelled in tokenizer.json.
// accel's model works on the bytes themselves, so it decodes the vocabulary once at load.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace accel::text {

// The bytes `spelled` stands for, or nullopt when a character of it is outside the alphabet.
std::optional<std::string> decode_byte_level(std::string_view spelled);

}  // namespace accel::text
