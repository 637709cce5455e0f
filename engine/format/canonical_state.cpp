// Reading a checkpoint in canonical form (see canonical_state.hpp): the replicated layout
// (model.safetensors + optimizer.safetensors) and the zero layout (one shard file per rank,
// resliced with locate_flat_range), including zero records written before format 2.
#include "engine/format/canonical_state.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "engine/format/reslice.hpp"
#include "engine/format/safetensors.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/common/strings.hpp"

namespace accel::engine {
namespace {

using Json = nlohmann::json;

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kKnownKinds[] = {"exp_avg", "exp_avg_sq", "momentum"};

// The element count of a recorded shape; -1 for a negative dimension or a count past 2^62 (a
// hostile record whose product wraps must not match its recorded numel). 2^62 leaves the sums
// and the padding of a unit's flat layout room in int64.
constexpr int64_t kMaxRecordedNumel = int64_t{1} << 62;
int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > kMaxRecordedNumel) return -1;
  return n;
}

std::unique_ptr<SafetensorsReader> open_file(const std::string& dir, const std::string& name, const std::string& why) {
  std::string path = dir + "/" + name;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw RunError("checkpoint " + dir + ": " + name + " is missing (" + why + ")");
  return std::make_unique<SafetensorsReader>(path);
}

// The tensor `name` of `file` must exist, hold `numel` elements of a floating dtype.
void require_float(const SafetensorsReader& file, const std::string& name, int64_t numel) {
  const auto* info = file.find(name);
  if (!info) throw RunError(file.path() + ": tensor '" + name + "' is missing");
  if (!at::isFloatingType(info->dtype) || info->numel != numel)
    throw RunError(file.path() + ": tensor '" + name + "' is " + std::string(c10::toString(info->dtype)) +
                   shape_text(info->shape) + ", expected " + std::to_string(numel) + " floating-point values");
}

int64_t read_count(const SafetensorsReader& file, const std::string& name) {
  const auto* info = file.find(name);
  if (!info || info->numel != 1 || at::isFloatingType(info->dtype))
    throw RunError(file.path() + ": tensor '" + name + "' is missing or not an integer step count");
  return file.read(name).to(at::kLong).item<int64_t>();
}

// ---- replicated: model.safetensors (weights by name) + optimizer.safetensors (Optimizer) ----

class ReplicatedState final : public CanonicalState {
 public:
  explicit ReplicatedState(const std::string& dir) : CanonicalState(dir) {
    model_ = open_file(dir, kModelFile, "a replicated checkpoint keeps the weights there");
    optimizer_ = open_file(dir, kOptimizerFile, "a replicated checkpoint keeps the optimizer state there");
    const auto& tensors = model_->tensors();
    if (tensors.empty()) throw RunError(model_->path() + ": holds no parameters");
    for (const char* kind : kKnownKinds)
      if (optimizer_->find(std::string(kind) + "." + tensors[0].name)) kinds_.push_back(kind);
    step_count_ = read_count(*optimizer_, "step_count");
    for (const auto& t : tensors) {
      require_float(*model_, t.name, t.numel);
      for (const auto& kind : kinds_) require_float(*optimizer_, kind + "." + t.name, t.numel);
      add_param({t.name, t.shape, t.numel}, read_count(*optimizer_, "step." + t.name));
    }
    description_ = "replicated layout, " + std::to_string(tensors.size()) + " parameters";
  }

 private:
  at::Tensor read_checked(size_t index, const std::string& kind, int64_t begin, int64_t count) const override {
    const std::string& name = params()[index].name;
    if (kind == kParamKind) return model_->read_range(name, begin, count).to(at::kFloat);
    return optimizer_->read_range(kind + "." + name, begin, count).to(at::kFloat);
  }

  std::unique_ptr<SafetensorsReader> model_, optimizer_;
};

// ---- zero: per rank, "<unit>.master" / "<unit>.<kind>" shards [S] and "<unit>.step" ----

struct ZeroUnit {
  std::string name;
  FlatLayout layout;
};

class ZeroState final : public CanonicalState {
 public:
  ZeroState(const std::string& dir, const Json& layout) : CanonicalState(dir) {
    const Json& world_json = layout.contains("world_size") ? layout["world_size"] : Json();
    if (!world_json.is_number_integer() || world_json.get<int>() < 1 || !layout.contains("units") ||
        !layout["units"].is_array() || layout["units"].empty())
      throw RunError("checkpoint " + dir + ": the zero layout record in trainer.json lacks world_size or units");
    const int world = world_json.get<int>();
    for (int r = 0; r < world; ++r)
      shards_.push_back(open_file(dir, zero_shard_file(r), "the layout record says " + std::to_string(world) +
                                                               " ranks wrote shards"));
    std::vector<std::vector<ParamRecord>> unit_params = parameter_records(layout);
    if (layout.contains("state_kinds")) {
      for (const auto& k : layout["state_kinds"]) {
        std::string kind = k.is_string() ? k.get<std::string>() : "";
        if (std::find(std::begin(kKnownKinds), std::end(kKnownKinds), kind) == std::end(kKnownKinds))
          throw RunError("checkpoint " + dir + ": unknown optimizer state kind " + k.dump() + " in trainer.json");
        kinds_.push_back(kind);
      }
    } else {  // format 1: the kinds are the tensors present
      for (const char* kind : kKnownKinds)
        if (shards_[0]->find(layout["units"][0].value("unit", "") + "." + kind)) kinds_.push_back(kind);
    }
    for (size_t u = 0; u < unit_params.size(); ++u) {
      const Json& rec = layout["units"][u];
      std::vector<int64_t> numels;
      for (const auto& p : unit_params[u]) numels.push_back(p.numel);
      ZeroUnit unit{rec.value("unit", ""), FlatLayout(numels, world)};
      check_unit_record(rec, unit.layout);
      int64_t step = 0;
      for (int r = 0; r < world; ++r) {
        const SafetensorsReader& file = *shards_[size_t(r)];
        require_float(file, unit.name + ".master", unit.layout.shard_numel());
        for (const auto& kind : kinds_) require_float(file, unit.name + "." + kind, unit.layout.shard_numel());
        int64_t s = read_count(file, unit.name + ".step");
        if (r > 0 && s != step)
          throw RunError("checkpoint " + dir + ": unit " + unit.name + " has step " + std::to_string(step) +
                         " in rank 0's shard but " + std::to_string(s) + " in rank " + std::to_string(r) + "'s");
        step = s;
      }
      step_count_ = std::max(step_count_, step);
      for (size_t k = 0; k < unit_params[u].size(); ++k) {
        owner_.push_back({units_.size(), unit.layout.param_offset(int(k))});
        add_param(unit_params[u][k], step);
      }
      units_.push_back(std::move(unit));
    }
    description_ = "zero layout, " + std::to_string(world) + " rank(s), " + std::to_string(units_.size()) + " units";
  }

 private:
  struct Owner {
    size_t unit;
    int64_t offset;  // of the parameter in the unit's flat buffer
  };

  // Format 2 records name every parameter; format 1 records only each unit's numel, and the
  // checkpoint then holds model.safetensors (rank 0's gather, spec order), whose header gives
  // the names and shapes to walk the units with.
  std::vector<std::vector<ParamRecord>> parameter_records(const Json& layout) const {
    std::vector<std::vector<ParamRecord>> out;
    const Json& units = layout["units"];
    if (units[0].contains("params")) {
      for (const auto& u : units) {
        std::vector<ParamRecord> params;
        int64_t unit_numel = 0;
        for (const auto& p : u.value("params", Json::array())) {
          ParamRecord rec{p.value("name", ""), p.value("shape", std::vector<int64_t>{}), p.value("numel", int64_t(-1))};
          if (rec.name.empty() || rec.numel < 0 || rec.numel != numel_of(rec.shape))
            throw RunError("checkpoint " + dir_ + ": trainer.json: unit " + u.value("unit", "?") +
                           " has a parameter record without a name or whose numel does not match its shape");
          if (__builtin_add_overflow(unit_numel, rec.numel, &unit_numel) || unit_numel > kMaxRecordedNumel)
            throw RunError("checkpoint " + dir_ + ": trainer.json: the parameters of unit " + u.value("unit", "?") +
                           " add up to more than 2^62 values");
          params.push_back(std::move(rec));
        }
        out.push_back(std::move(params));
      }
      return out;
    }
    auto model = open_file(dir_, kModelFile, "a zero checkpoint of format 1 names its parameters there");
    size_t next = 0;
    const auto& tensors = model->tensors();
    for (const auto& u : units) {
      int64_t want = u.value("numel", int64_t(0)), have = 0;
      std::vector<ParamRecord> params;
      while (have < want && next < tensors.size()) {
        params.push_back({tensors[next].name, tensors[next].shape, tensors[next].numel});
        if (__builtin_add_overflow(have, tensors[next++].numel, &have)) break;  // then have != want below
      }
      if (have != want)
        throw RunError("checkpoint " + dir_ + ": the parameters of " + model->path() + " do not add up to unit " +
                       u.value("unit", "?") + "'s " + std::to_string(want) + " values");
      out.push_back(std::move(params));
    }
    return out;
  }

  void check_unit_record(const Json& rec, const FlatLayout& layout) const {
    std::string name = rec.value("unit", "");
    auto expect = [&](const char* key, int64_t value) {
      if (key == std::string("numel") || rec.contains(key))
        if (rec.value(key, int64_t(-1)) != value)
          throw RunError("checkpoint " + dir_ + ": trainer.json: unit '" + name + "' records " + key + " " +
                         rec.value(key, Json()).dump() + " but its parameters give " + std::to_string(value));
    };
    if (name.empty()) throw RunError("checkpoint " + dir_ + ": trainer.json: a zero unit record has no name");
    expect("numel", layout.numel());
    expect("padded_numel", layout.padded_numel());
    expect("shard_numel", layout.shard_numel());
    const Json& params = rec.contains("params") ? rec["params"] : Json::array();
    for (size_t k = 0; k < params.size(); ++k)
      if (params[k].value("offset", int64_t(-1)) != layout.param_offset(int(k)))
        throw RunError("checkpoint " + dir_ + ": trainer.json: parameter " + params[k].value("name", "?") +
                       " of unit '" + name + "' records offset " + params[k].value("offset", Json()).dump() +
                       " but the parameters before it end at " + std::to_string(layout.param_offset(int(k))));
  }

  at::Tensor read_checked(size_t index, const std::string& kind, int64_t begin, int64_t count) const override {
    const Owner& owner = owner_[index];
    const ZeroUnit& unit = units_[owner.unit];
    const std::string tensor = unit.name + "." + (kind == kParamKind ? std::string("master") : kind);
    at::Tensor out = at::empty({count}, at::kFloat);
    for (const auto& piece : locate_flat_range(unit.layout, owner.offset + begin, count))
      out.narrow(0, piece.dest_offset, piece.numel)
          .copy_(shards_[size_t(piece.rank)]->read_range(tensor, piece.shard_offset, piece.numel));
    return out;
  }

  std::vector<std::unique_ptr<SafetensorsReader>> shards_;  // by writer rank
  std::vector<ZeroUnit> units_;
  std::vector<Owner> owner_;  // by parameter index
};

}  // namespace

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string zero_shard_file(int rank) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "zero_rank_%05d.safetensors", rank);
  return buf;
}

Json zero_layout_json(const std::string& policy, int world, const std::vector<ZeroUnitRecord>& units,
                      const std::vector<std::string>& state_kinds, const std::string& dtype) {
  Json out_units = Json::array();
  for (const auto& u : units) {
    Json params = Json::array();
    for (size_t k = 0; k < u.params.size(); ++k)
      params.push_back({{"name", u.params[k].name},
                        {"shape", u.params[k].shape},
                        {"offset", u.layout.param_offset(int(k))},
                        {"numel", u.params[k].numel}});
    out_units.push_back({{"unit", u.unit},
                         {"numel", u.layout.numel()},
                         {"padded_numel", u.layout.padded_numel()},
                         {"shard_numel", u.layout.shard_numel()},
                         {"params", std::move(params)}});
  }
  return {{"layout", "zero"},   {"format", kZeroLayoutFormat}, {"world_size", world}, {"policy", policy},
          {"dtype", dtype},     {"state_kinds", state_kinds},  {"units", std::move(out_units)}};
}

std::string describe_state_kinds(const std::vector<std::string>& kinds) {
  const std::string s = "{" + join(kinds) + "}";
  std::set<std::string> k(kinds.begin(), kinds.end());
  if (k == std::set<std::string>{"exp_avg", "exp_avg_sq"}) return s + " (adamw)";
  if (k == std::set<std::string>{"momentum"}) return s + " (sgd with momentum)";
  if (k.empty()) return s + " (sgd without momentum)";
  return s;
}

std::unique_ptr<CanonicalState> CanonicalState::open(const std::string& dir, const Json& layout) {
  const std::string kind = layout.is_object() ? layout.value("layout", "") : "";
  if (kind == "replicated") return std::make_unique<ReplicatedState>(dir);
  if (kind == "zero") return std::make_unique<ZeroState>(dir, layout);
  throw RunError("checkpoint " + dir + ": trainer.json records backend layout " +
                 (layout.is_object() && layout.contains("layout") ? layout["layout"].dump() : std::string("(none)")) +
                 ", which this accel cannot read (it reads \"replicated\" and \"zero\")");
}

void CanonicalState::add_param(ParamRecord p, int64_t step) {
  if (!index_.emplace(p.name, params_.size()).second)
    throw RunError("checkpoint " + dir_ + ": parameter '" + p.name + "' is recorded twice");
  params_.push_back(std::move(p));
  steps_.push_back(step);
}

const ParamRecord* CanonicalState::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &params_[it->second];
}

int64_t CanonicalState::step(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw RunError("checkpoint " + dir_ + " has no parameter '" + name + "'");
  return steps_[it->second];
}

at::Tensor CanonicalState::read(const std::string& name, const std::string& kind, int64_t begin, int64_t count) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw RunError("checkpoint " + dir_ + " has no parameter '" + name + "'");
  if (kind != kParamKind && std::find(kinds_.begin(), kinds_.end(), kind) == kinds_.end())
    throw RunError("checkpoint " + dir_ + " holds no optimizer state '" + kind + "' (it holds " +
                   describe_state_kinds(kinds_) + ")");
  const ParamRecord& p = params_[it->second];
  if (begin < 0 || count < 0 || begin + count > p.numel)
    throw RunError("checkpoint " + dir_ + ": elements [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                   ") are outside parameter '" + name + "' (" + std::to_string(p.numel) + " values)");
  return read_checked(it->second, kind, begin, count);
}

at::Tensor CanonicalState::read_full(const std::string& name, const std::string& kind) const {
  const ParamRecord* p = find(name);
  if (!p) throw RunError("checkpoint " + dir_ + " has no parameter '" + name + "'");
  return read(name, kind, 0, p->numel).view(p->shape);
}

}  // namespace accel::engine
