// The documents of a text data file, in file order:
//   text   one document per line (its "\n" or "\r\n" not included); empty lines are skipped
//   jsonl  one JSON object per non-blank line; the document is its string member `field` (skipped
//          when empty)
// Every document must be valid UTF-8. A malformed line (not JSON, not an object, the field missing
// or not a string, invalid UTF-8) is a DataError naming file:line:col and the fix.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace accel::text {

enum class DocumentFormat { text, jsonl };

// Calls `visit(document)` for each document of `bytes` (the content of `path`). Returns the count.
int64_t for_each_document(std::string_view bytes, DocumentFormat format, const std::string& field,
                          const std::string& path, const std::function<void(std::string_view)>& visit);

}  // namespace accel::text
