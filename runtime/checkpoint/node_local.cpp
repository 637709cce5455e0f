// Node-local checkpoints: the storage probe, the merge of the machines' file lists, the note on
// absent files (see the header and docs/design/0013).
#include "runtime/checkpoint/node_local.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace accel::checkpoint {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::string machine_list(const std::vector<int>& machines) {
  std::string out;
  for (int m : machines) out += (out.empty() ? "" : ", ") + std::to_string(m);
  return out;
}

std::vector<int> parse_machines(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(std::stoi(item));
  return out;
}

std::string join_machines(const std::vector<int>& machines) {
  std::string out;
  for (int m : machines) out += (out.empty() ? "" : ",") + std::to_string(m);
  return out;
}

}  // namespace

int StorageLayout::num_machines() const {
  int n = 0;
  for (const auto& g : groups) n += int(g.size());
  return n;
}

int StorageLayout::group_of_machine(int machine) const {
  for (size_t g = 0; g < groups.size(); ++g)
    if (std::find(groups[g].begin(), groups[g].end(), machine) != groups[g].end()) return int(g);
  throw std::out_of_range("machine " + std::to_string(machine) + " is in no storage group");
}

std::string StorageLayout::describe() const {
  if (shared())
    return num_machines() == 1 ? "output_dir is on one machine"
                               : "output_dir is shared by all " + std::to_string(num_machines()) + " machines";
  std::string text = "output_dir is node-local (" + std::to_string(groups.size()) + " separate storages:";
  for (size_t g = 0; g < groups.size(); ++g)
    text += (g ? "; " : " ") + std::string(groups[g].size() == 1 ? "machine " : "machines ") + machine_list(groups[g]);
  return text + "): each writes its own ranks' checkpoint files; to resume at another world size, copy the "
                "machines' step_N directories into one";
}

StorageLayout storage_layout_from_sightings(const std::vector<std::vector<int>>& sees) {
  const int n = int(sees.size());
  std::vector<std::set<int>> sets;
  for (int m = 0; m < n; ++m) {
    sets.emplace_back(sees[m].begin(), sees[m].end());
    if (!sets.back().count(m))
      throw RunError("checkpoint storage probe: machine " + std::to_string(m) +
                     " cannot see the marker file it wrote into output_dir (a file system that hides new files?)");
  }
  StorageLayout layout;
  layout.groups.clear();
  std::set<int> placed;
  for (int m = 0; m < n; ++m) {
    for (int k : sets[m]) {
      if (k < 0 || k >= n) throw RunError("checkpoint storage probe: machine " + std::to_string(m) +
                                          " reports a marker of machine " + std::to_string(k) + ", which does not exist");
      if (sets[k] != sets[m])
        throw RunError("checkpoint storage probe: machine " + std::to_string(m) + " sees the output_dir of machines {" +
                       machine_list({sets[m].begin(), sets[m].end()}) + "} but machine " + std::to_string(k) +
                       " sees {" + machine_list({sets[k].begin(), sets[k].end()}) +
                       "}: output_dir is shared inconsistently; give every machine either the same shared "
                       "directory or its own local one");
    }
    if (placed.count(m)) continue;
    layout.groups.emplace_back(sets[m].begin(), sets[m].end());
    placed.insert(sets[m].begin(), sets[m].end());
  }
  return layout;
}

StorageLayout probe_storage(const std::string& output_dir, int machine, int num_machines, bool first_on_machine,
                            const std::string& nonce, const std::string& key_prefix, const KeyValueExchange& kv) {
  auto marker = [&](int m) {
    return (fs::path(output_dir) / (".accel-storage-probe." + nonce + ".machine" + std::to_string(m))).string();
  };
  if (first_on_machine) {
    std::error_code ec;
    fs::create_directories(output_dir, ec);
    if (ec) throw RunError("cannot create training.output_dir " + output_dir + ": " + ec.message());
    write_file_synced(marker(machine), nonce + "\n");
    kv.set(key_prefix + "storage/written/" + std::to_string(machine), "1");
    for (int m = 0; m < num_machines; ++m) kv.get(key_prefix + "storage/written/" + std::to_string(m));
    std::vector<int> seen;
    for (int m = 0; m < num_machines; ++m)
      if (fs::exists(marker(m), ec)) seen.push_back(m);
    kv.set(key_prefix + "storage/sees/" + std::to_string(machine), join_machines(seen));
  }
  std::vector<std::vector<int>> sees;
  for (int m = 0; m < num_machines; ++m) sees.push_back(parse_machines(kv.get(key_prefix + "storage/sees/" + std::to_string(m))));
  if (first_on_machine) {  // every machine has looked: the marker has done its work
    std::error_code ec;
    fs::remove(marker(machine), ec);
  }
  return storage_layout_from_sightings(sees);
}

std::vector<FileEntry> merge_group_files(const StorageLayout& layout,
                                         const std::vector<std::vector<FileEntry>>& files_of_group) {
  std::map<std::string, FileEntry> merged;
  for (size_t g = 0; g < files_of_group.size(); ++g) {
    for (const auto& f : files_of_group[g]) {
      auto [it, fresh] = merged.emplace(f.name, f);
      FileEntry& e = it->second;
      if (fresh) {
        e.machines.clear();
      } else if (e.bytes != f.bytes || e.fnv1a64 != f.fnv1a64) {
        throw CheckpointError("checkpoint file " + f.name + " differs between machines " + machine_list(e.machines) +
                              " and " + machine_list(layout.groups[g]) + " (" + std::to_string(e.bytes) + " vs " +
                              std::to_string(f.bytes) + " bytes, or different contents): replicas of the same "
                              "state diverged; this is a bug, please report it with `accel env`");
      }
      e.machines.insert(e.machines.end(), layout.groups[g].begin(), layout.groups[g].end());
      std::sort(e.machines.begin(), e.machines.end());
    }
  }
  std::vector<FileEntry> out;
  for (auto& [name, e] : merged) out.push_back(std::move(e));
  return out;
}

std::string files_to_text(const std::vector<FileEntry>& files) {
  Json j = Json::array();
  for (const auto& f : files) j.push_back(Json{{"name", f.name}, {"bytes", f.bytes}, {"fnv1a64", f.fnv1a64}});
  return j.dump();
}

std::vector<FileEntry> files_from_text(const std::string& text) {
  std::vector<FileEntry> out;
  for (const auto& j : Json::parse(text))
    out.push_back(FileEntry{j.at("name").get<std::string>(), j.at("bytes").get<uint64_t>(),
                            j.at("fnv1a64").get<uint64_t>(), {}});
  return out;
}

std::string elsewhere_note(const Manifest& verified, const std::string& dir) {
  if (verified.elsewhere.empty()) return "";
  std::map<std::vector<int>, std::vector<std::string>> by_holders;
  for (const auto& f : verified.elsewhere) by_holders[f.machines].push_back(f.name);
  std::string text = "this checkpoint was written to node-local storage and " +
                     std::to_string(verified.elsewhere.size()) + " of its files are on other machines:";
  for (const auto& [holders, names] : by_holders) {
    text += "\n  machine" + std::string(holders.size() > 1 ? "s " : " ") + machine_list(holders) + " hold" +
            (holders.size() > 1 ? "" : "s") + " " + std::to_string(names.size()) + ": ";
    for (size_t i = 0; i < names.size() && i < 4; ++i) text += (i ? ", " : "") + names[i];
    if (names.size() > 4) text += ", ...";
  }
  const std::string step = fs::path(dir).filename().string();
  return text + "\nto resume at another world size or backend, or to merge weights, copy every machine's " + step +
         " directory into one (e.g. rsync -a OTHER_MACHINE:<its output_dir>/checkpoints/" + step + "/ " + dir +
         "/) and name it in training.resume or to accel merge-weights";
}

}  // namespace accel::checkpoint
