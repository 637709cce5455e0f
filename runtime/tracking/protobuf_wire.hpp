// The protobuf wire format, as much of it as TensorBoard's Event messages use: varints, 64- and
// 32-bit fixed fields and length-delimited fields (strings, bytes, nested messages). Fields are
// written in the order the caller gives; readers accept any order, as protobuf requires.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace accel::tracking::proto {

enum class WireType : uint8_t { varint = 0, fixed64 = 1, length_delimited = 2, fixed32 = 5 };

// Appends fields to one message's bytes.
class Writer {
 public:
  Writer& varint(int field, uint64_t value);
  Writer& int64(int field, int64_t value) { return varint(field, uint64_t(value)); }  // two's complement, as int64
  Writer& fixed64_double(int field, double value);
  Writer& fixed32_float(int field, float value);
  Writer& bytes(int field, std::string_view value);  // strings, bytes and nested messages
  const std::string& data() const { return out_; }

 private:
  void key(int field, WireType type);
  void raw_varint(uint64_t value);
  std::string out_;
};

// One field of a parsed message. `number` holds varints and the fixed fields' bits; `bytes` a
// length-delimited field's contents (a view into the parsed buffer).
struct Field {
  int field = 0;
  WireType type = WireType::varint;
  uint64_t number = 0;
  std::string_view bytes;
};

// The fields of one message, in order; nullopt when the bytes are not a well-formed message (a
// varint or length running past the end, a wire type this reader does not know).
std::optional<std::vector<Field>> parse(std::string_view message);

double as_double(const Field& f);  // a fixed64 field's bits
float as_float(const Field& f);    // a fixed32 field's bits

}  // namespace accel::tracking::proto
