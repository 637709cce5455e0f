// The launcher's list of keys that kept their default (see default_keys.hpp).
#include "runtime/config/default_keys.hpp"

#include <fstream>
#include <sstream>

namespace accel::config {

std::string default_keys_path(const std::string& job_file) { return job_file + ".defaults"; }

std::string default_keys_text(const LoadedJob& loaded) {
  std::ostringstream out;
  out << "# keys of the resolved job beside this file that kept accel's default\n";
  for (const auto& [key, where] : loaded.sources)
    if (where.origin == Location::Origin::Default) out << key << "\n";
  return out.str();
}

void restore_default_origins(LoadedJob& loaded) {
  std::ifstream in(default_keys_path(loaded.file));
  std::string key;
  while (std::getline(in, key)) {
    if (key.empty() || key[0] == '#') continue;
    auto it = loaded.sources.find(key);
    if (it != loaded.sources.end() && it->second.origin == Location::Origin::File) it->second = Location{};
  }
}

}  // namespace accel::config
