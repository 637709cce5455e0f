#include "runtime/tracking/tfrecord.hpp"

#include <cstdint>
#include <fstream>
#include <iterator>

#include "runtime/common/errors.hpp"
#include "runtime/tracking/crc32c.hpp"

namespace accel::tracking {
namespace {

void put_le(std::string& out, uint64_t v, int width) {
  for (int i = 0; i < width; ++i) out.push_back(char(uint8_t(v >> (8 * i))));
}

uint64_t get_le(std::string_view in, size_t pos, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; ++i) v |= uint64_t(uint8_t(in[pos + size_t(i)])) << (8 * i);
  return v;
}

}  // namespace

std::string tfrecord_frame(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  put_le(out, payload.size(), 8);
  put_le(out, masked_crc32c(out), 4);
  out.append(payload);
  put_le(out, masked_crc32c(payload), 4);
  return out;
}

TfRecords read_tfrecords(const std::string& path) {
  TfRecords result;
  std::ifstream in(path, std::ios::binary);
  if (!in) return result;
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string_view all(data);
  size_t pos = 0;
  auto damaged = [&](const char* what) {
    return RunError(path + ": record at byte " + std::to_string(pos) + ": " + what +
                    " CRC does not match (the file is damaged); move it away to resume");
  };
  while (pos < all.size()) {
    if (all.size() - pos < 12) {
      result.cut_short = true;
      break;
    }
    const uint64_t length = get_le(all, pos, 8);
    if (uint32_t(get_le(all, pos + 8, 4)) != masked_crc32c(all.substr(pos, 8))) throw damaged("length");
    if (length > all.size() - pos - 12 || all.size() - pos - 12 - length < 4) {
      result.cut_short = true;
      break;
    }
    const std::string_view payload = all.substr(pos + 12, size_t(length));
    if (uint32_t(get_le(all, pos + 12 + length, 4)) != masked_crc32c(payload)) throw damaged("payload");
    result.payloads.emplace_back(payload);
    pos += 16 + size_t(length);
  }
  return result;
}

}  // namespace accel::tracking
