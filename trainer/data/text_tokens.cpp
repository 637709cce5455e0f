// Byte-level text: see text_tokens.hpp.
#include "trainer/data/text_tokens.hpp"

#include <vector>

#include "trainer/data/data_error.hpp"
#include "trainer/data/mapped_file.hpp"

namespace accel::train {

TokenStore read_text_tokens(const std::string& path) {
  const MappedFile file(path);
  if (file.size() == 0) throw DataError("data file '" + path + "': empty; a text file needs at least one byte");
  std::vector<uint16_t> tokens(file.bytes(), file.bytes() + file.size());
  return TokenStore::owned(std::move(tokens));
}

}  // namespace accel::train
