// GPT-2's byte-level alphabet: see byte_level.hpp.
#include "trainer/text/byte_level.hpp"

#include <array>
#include <cstdint>

namespace accel::text {

namespace {

bool printable_as_itself(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

// Code point -> byte for the 324 code points below U+0144 (-1: not in the alphabet).
std::array<int, 0x144> build_inverse() {
  std::array<int, 0x144> inverse{};
  inverse.fill(-1);
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    if (printable_as_itself(b)) inverse[b] = b;
    else inverse[0x100 + next++] = b;
  }
  return inverse;
}

}  // namespace

std::optional<std::string> decode_byte_level(std::string_view spelled) {
  static const std::array<int, 0x144> inverse = build_inverse();
  std::string bytes;
  bytes.reserve(spelled.size());
  const auto* p = reinterpret_cast<const uint8_t*>(spelled.data());
  for (size_t i = 0; i < spelled.size();) {
    uint32_t cp;
    if (p[i] < 0x80) {
      cp = p[i];
      i += 1;
    } else if ((p[i] >> 5) == 0x6 && i + 1 < spelled.size()) {
      cp = ((p[i] & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu);
      i += 2;
    } else {
      return std::nullopt;  // every character of the alphabet is below U+0800
    }
    if (cp >= inverse.size() || inverse[cp] < 0) return std::nullopt;
    bytes += static_cast<char>(inverse[cp]);
  }
  return bytes;
}

}  // namespace accel::text
