// The documents of a text data file: see text_documents.hpp.
#include "trainer/text/text_documents.hpp"

#include <nlohmann/json.hpp>

#include "trainer/data/data_error.hpp"
#include "trainer/text/utf8.hpp"

namespace accel::text {

namespace {

[[noreturn]] void bad_line(const std::string& path, int64_t line, size_t col, const std::string& what,
                           const std::string& fix) {
  throw train::DataError(path + ":" + std::to_string(line) + ":" + std::to_string(col) + ": " + what + "; " + fix);
}

void check_utf8(std::string_view s, const std::string& path, int64_t line, size_t col_base) {
  const size_t bad = first_invalid_utf8(s);
  if (bad != std::string_view::npos)
    bad_line(path, line, col_base + bad + 1, "invalid UTF-8 (byte " + std::to_string(static_cast<uint8_t>(s[bad])) + ")",
             "re-encode the file as UTF-8 (iconv -f LATIN1 -t UTF-8, for example)");
}

bool blank(std::string_view s) { return s.find_first_not_of(" \t\r") == std::string_view::npos; }

}  // namespace

int64_t for_each_document(std::string_view bytes, DocumentFormat format, const std::string& field,
                          const std::string& path, const std::function<void(std::string_view)>& visit) {
  int64_t count = 0, line_number = 0;
  for (size_t start = 0; start < bytes.size();) {
    size_t end = bytes.find('\n', start);
    if (end == std::string_view::npos) end = bytes.size();
    std::string_view line = bytes.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (format == DocumentFormat::text) {
      if (line.empty()) continue;
      check_utf8(line, path, line_number, 0);
      visit(line);
      ++count;
      continue;
    }
    if (blank(line)) continue;
    nlohmann::json object;
    try {
      object = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      bad_line(path, line_number, e.byte, "not a JSON value (" + std::string(e.what()) + ")",
               "each line of a jsonl file must be one JSON object");
    }
    if (!object.is_object()) bad_line(path, line_number, 1, "not a JSON object", "each line must be {\"" + field + "\": \"...\"}");
    const auto it = object.find(field);
    if (it == object.end())
      bad_line(path, line_number, 1, "no field '" + field + "'", "set data.field to the member holding the text");
    if (!it->is_string())
      bad_line(path, line_number, 1, "field '" + field + "' is " + std::string(it->type_name()) + ", not a string",
               "set data.field to the member holding the text");
    const std::string& doc = it->get_ref<const std::string&>();
    if (doc.empty()) continue;  // as in text: no document, no bos/eos
    check_utf8(doc, path, line_number, 0);  // nlohmann accepts \ud800 escapes; the tokenizer must not see them
    visit(doc);
    ++count;
  }
  return count;
}

}  // namespace accel::text
