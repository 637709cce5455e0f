#include "runtime/tracking/protobuf_wire.hpp"

#include <cstring>

namespace accel::tracking::proto {

void Writer::raw_varint(uint64_t value) {
  while (value >= 0x80) {
    out_.push_back(char(uint8_t(value) | 0x80));
    value >>= 7;
  }
  out_.push_back(char(uint8_t(value)));
}

void Writer::key(int field, WireType type) { raw_varint((uint64_t(field) << 3) | uint64_t(type)); }

Writer& Writer::varint(int field, uint64_t value) {
  key(field, WireType::varint);
  raw_varint(value);
  return *this;
}

Writer& Writer::fixed64_double(int field, double value) {
  key(field, WireType::fixed64);
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  for (int i = 0; i < 8; ++i) out_.push_back(char(uint8_t(bits >> (8 * i))));  // little-endian
  return *this;
}

Writer& Writer::fixed32_float(int field, float value) {
  key(field, WireType::fixed32);
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  for (int i = 0; i < 4; ++i) out_.push_back(char(uint8_t(bits >> (8 * i))));
  return *this;
}

Writer& Writer::bytes(int field, std::string_view value) {
  key(field, WireType::length_delimited);
  raw_varint(value.size());
  out_.append(value);
  return *this;
}

namespace {

bool read_varint(std::string_view in, size_t& pos, uint64_t& value) {
  value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos >= in.size()) return false;
    const uint8_t byte = uint8_t(in[pos++]);
    value |= uint64_t(byte & 0x7F) << shift;
    if (!(byte & 0x80)) return true;
  }
  return false;  // more than ten bytes
}

uint64_t little_endian(std::string_view in, size_t pos, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; ++i) v |= uint64_t(uint8_t(in[pos + size_t(i)])) << (8 * i);
  return v;
}

}  // namespace

std::optional<std::vector<Field>> parse(std::string_view message) {
  std::vector<Field> fields;
  size_t pos = 0;
  while (pos < message.size()) {
    uint64_t key = 0;
    if (!read_varint(message, pos, key)) return std::nullopt;
    Field f;
    f.field = int(key >> 3);
    f.type = WireType(key & 7);
    if (f.field == 0) return std::nullopt;
    switch (f.type) {
      case WireType::varint:
        if (!read_varint(message, pos, f.number)) return std::nullopt;
        break;
      case WireType::fixed64:
      case WireType::fixed32: {
        const size_t width = f.type == WireType::fixed64 ? 8 : 4;
        if (message.size() - pos < width) return std::nullopt;
        f.number = little_endian(message, pos, int(width));
        pos += width;
        break;
      }
      case WireType::length_delimited: {
        uint64_t n = 0;
        if (!read_varint(message, pos, n) || n > message.size() - pos) return std::nullopt;
        f.bytes = message.substr(pos, size_t(n));
        pos += size_t(n);
        break;
      }
      default:
        return std::nullopt;
    }
    fields.push_back(f);
  }
  return fields;
}

double as_double(const Field& f) {
  double v;
  std::memcpy(&v, &f.number, sizeof v);
  return v;
}

float as_float(const Field& f) {
  const uint32_t bits = uint32_t(f.number);
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

}  // namespace accel::tracking::proto
