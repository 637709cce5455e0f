// DataIdentity: see data_identity.hpp.
#include "trainer/data/data_identity.hpp"

#include <sstream>
#include <vector>

#include "trainer/data/data_error.hpp"
#include "trainer/data/token_store.hpp"

namespace accel::train {

nlohmann::json DataIdentity::to_json() const {
  return nlohmann::json{{"kind", kind},       {"path", path},
                        {"num_tokens", num_tokens}, {"content_fnv1a64", hex64(content_hash)},
                        {"order", order},     {"seed", seed},
                        {"val_fraction", val_fraction}, {"seq_len", seq_len}};
}

DataIdentity DataIdentity::from_json(const nlohmann::json& state) {
  auto field = [&](const char* name) -> const nlohmann::json& {
    if (!state.is_object() || !state.contains(name))
      throw DataError("checkpoint data state: missing field '" + std::string(name) + "' in " + state.dump());
    return state.at(name);
  };
  DataIdentity id;
  try {
    id.kind = field("kind").get<std::string>();
    id.path = field("path").get<std::string>();
    id.num_tokens = field("num_tokens").get<int64_t>();
    const auto hash = field("content_fnv1a64").get<std::string>();
    id.content_hash = std::stoull(hash, nullptr, 16);
    id.order = field("order").get<std::string>();
    id.seed = field("seed").get<uint64_t>();
    id.val_fraction = field("val_fraction").get<double>();
    id.seq_len = field("seq_len").get<int64_t>();
  } catch (const DataError&) {
    throw;
  } catch (const std::exception& e) {
    throw DataError("checkpoint data state: malformed (" + std::string(e.what()) + ") in " + state.dump());
  }
  return id;
}

namespace {
std::string describe_source(const DataIdentity& d) {
  std::string s = d.kind == "synthetic" ? "synthetic data" : d.kind + " file '" + d.path + "'";
  return s + " (" + std::to_string(d.num_tokens) + " tokens, fnv1a64 " + hex64(d.content_hash) + ")";
}
}  // namespace

void check_same_data(const DataIdentity& saved, const DataIdentity& now) {
  std::vector<std::string> diffs;
  auto differ = [&](const std::string& what, const std::string& was, const std::string& is) {
    diffs.push_back(what + " was " + was + ", now " + is);
  };
  if (saved.kind != now.kind) differ("data.kind", saved.kind, now.kind);
  if (saved.num_tokens != now.num_tokens || saved.content_hash != now.content_hash)
    differ("the data", describe_source(saved), describe_source(now));
  if (saved.order != now.order) differ("data.order", saved.order, now.order);
  if (saved.seq_len != now.seq_len)
    differ("training.seq_len", std::to_string(saved.seq_len), std::to_string(now.seq_len));
  if (saved.val_fraction != now.val_fraction) {
    std::ostringstream a, b;
    a << saved.val_fraction;
    b << now.val_fraction;
    differ("data.val_fraction", a.str(), b.str());
  }
  if (now.order == "shuffled" && saved.order == now.order && saved.seed != now.seed)
    differ("training.seed (it sets the shuffled order)", std::to_string(saved.seed), std::to_string(now.seed));
  if (diffs.empty()) return;
  std::string msg = "cannot resume: the checkpoint was trained on different data than this run would use:";
  for (const auto& d : diffs) msg += "\n  - " + d;
  msg += "\nresume with the data settings the checkpoint was written with, or start a new run in a fresh "
         "training.output_dir (or with training.resume: never)";
  throw DataError(msg);
}

}  // namespace accel::train
