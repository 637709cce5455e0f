#include "runtime/config/job_loader.hpp"

#include <filesystem>
#include <limits>

#include "runtime/config/import_accelerate.hpp"
#include "runtime/config/import_deepspeed.hpp"
#include "runtime/config/job_builder.hpp"
#include "runtime/config/json_reader.hpp"
#include "runtime/config/unguarded_read.hpp"
#include "runtime/config/validate.hpp"
#include "runtime/config/yaml_reader.hpp"
#include "runtime/hf/hf_config.hpp"

namespace accel::config {
namespace {

void throw_if(std::vector<Diagnostic>& errors) {
  if (!errors.empty()) throw ConfigError(errors);
}

void append(ImportResult& into, ImportResult&& from) {
  for (auto& a : from.assignments) into.assignments.push_back(std::move(a));
  for (auto& e : from.errors) into.errors.push_back(std::move(e));
  for (auto& w : from.warnings) into.warnings.push_back(std::move(w));
  for (auto& n : from.notes) into.notes.push_back(std::move(n));
  for (auto& k : from.auto_keys) into.auto_keys.push_back(std::move(k));
  if (from.batch) into.batch = from.batch;
}

// Reads the job file (any format) into file-layer assignments.
ImportResult read_file_layer(const std::string& file, FileFormat& format) {
  ImportResult result;
  // A .json job is a DeepSpeed config or an Accelerate config saved as JSON, which Accelerate reads
  // with Python's json module: it must be JSON, not merely YAML.
  YAML::Node root = is_json_path(file) ? read_json_file(file) : read_yaml_file(file);
  format = detect_format(root, file);
  switch (format) {
    case FileFormat::Accelerate: import_accelerate(root, file, result); break;
    case FileFormat::DeepSpeed:
      // A DeepSpeed JSON given as the job itself selects the deepspeed backend.
      result.assignments.push_back({"backend", YAML::Node("deepspeed"), Location::in_file(file, 1, 1)});
      import_deepspeed(root, file, result);
      break;
    default: read_native_job(root, file, result.assignments, result.errors); break;
  }
  return result;
}

// The last assignment of deepspeed.config_file across the layers, if any.
const Assignment* config_file_assignment(const std::vector<const std::vector<Assignment>*>& layers) {
  const Assignment* found = nullptr;
  for (const auto* layer : layers)
    for (const auto& a : *layer)
      if (a.path == "deepspeed.config_file" && a.value.IsScalar() && !a.value.Scalar().empty()) found = &a;
  return found;
}

// DeepSpeed's batch identity, once the world size is final. train_batch_size is any int64, so the
// arithmetic guards against overflow, and a derived value must fit its key (32-bit, >= 1).
void apply_batch_constraint(const BatchConstraint& c, JobBuilder& builder, std::vector<Diagnostic>& errors) {
  auto& t = builder.job().training;
  int64_t world = builder.job().num_processes;
  bool micro_set = builder.layer_of("training.micro_batch_size") != Layer::Default;
  bool accum_set = builder.layer_of("training.gradient_accumulation_steps") != Layer::Default;
  auto describe = "train_batch_size " + std::to_string(c.train_batch_size) + " = micro_batch_size x "
                  "gradient_accumulation_steps x num_processes (" + std::to_string(world) + ")";
  if (!micro_set || !accum_set) {
    bool derive_micro = !micro_set;
    int64_t other = derive_micro ? t.gradient_accumulation_steps : t.micro_batch_size;
    std::string path = derive_micro ? "training.micro_batch_size" : "training.gradient_accumulation_steps";
    int64_t divisor = other * world;  // both are 32-bit and >= 1: no overflow
    int64_t derived = c.train_batch_size / divisor;
    if (c.train_batch_size % divisor == 0 && derived <= std::numeric_limits<int>::max()) {
      builder.derive(path, Value{derived}, describe);
      return;
    }
  }
  int64_t product = 0;
  bool overflow = __builtin_mul_overflow(int64_t(t.micro_batch_size), int64_t(t.gradient_accumulation_steps), &product) ||
                  __builtin_mul_overflow(product, world, &product);
  if (overflow || product != c.train_batch_size)
    errors.push_back({"train_batch_size", c.where, "does not equal micro batch x accumulation x processes",
                      std::to_string(c.train_batch_size),
                      std::to_string(t.micro_batch_size) + " x " + std::to_string(t.gradient_accumulation_steps) +
                          " x " + std::to_string(world) + " = " + (overflow ? "more than 2^63" : std::to_string(product)),
                      "set train_batch_size to \"auto\", or make the three agree"});
}

}  // namespace

std::string to_string(FileFormat format) {
  switch (format) {
    case FileFormat::None: return "defaults";
    case FileFormat::Native: return "accel job";
    case FileFormat::Accelerate: return "Accelerate config";
    case FileFormat::DeepSpeed: return "DeepSpeed JSON";
  }
  return "?";
}

FileFormat detect_format(const YAML::Node& root, const std::string& file) {
  // A .json file that is not an object is a DeepSpeed config the importer reports as such.
  if (!root.IsMap()) return is_json_path(file) ? FileFormat::DeepSpeed : FileFormat::Native;
  if (root["distributed_type"] || root["compute_environment"]) return FileFormat::Accelerate;
  for (const char* key : {"zero_optimization", "train_batch_size", "train_micro_batch_size_per_gpu", "fp16", "bf16",
                          "steps_per_print", "wall_clock_breakdown"})
    if (root[key]) return FileFormat::DeepSpeed;
  if (is_json_path(file)) return FileFormat::DeepSpeed;
  return FileFormat::Native;
}

bool LoadedJob::is_explicit(const std::string& path) const {
  auto it = sources.find(path);
  return it != sources.end() && it->second.origin != Location::Origin::Default;
}

namespace {

LoadedJob load_job_unguarded(const LoadOptions& options) {
  LoadedJob loaded;
  loaded.file = options.file;

  ImportResult file_layer;
  if (!options.file.empty()) file_layer = read_file_layer(options.file, loaded.format);
  std::vector<Assignment> env_layer, cli_layer;
  read_environment(options.environment, env_layer, file_layer.errors);
  cli_layer = options.flag_assignments;
  read_set_overrides(options.set_overrides, cli_layer, file_layer.errors);

  // A DeepSpeed JSON named by deepspeed.config_file contributes to the file layer: its values fill
  // keys the job leaves unset, and a disagreement with the job file is an error naming both.
  if (const Assignment* cf = config_file_assignment({&file_layer.assignments, &env_layer, &cli_layer})) {
    std::string path = cf->value.Scalar();
    if (cf->where.origin == Location::Origin::File && !path.empty() && path[0] != '/')
      path = (std::filesystem::path(cf->where.file).parent_path() / path).lexically_normal().string();
    ImportResult ds;
    YAML::Node root = read_json_file(path);  // DeepSpeed reads it as JSON whatever its name
    import_deepspeed(root, path, ds);
    ds.assignments.insert(ds.assignments.end(), file_layer.assignments.begin(), file_layer.assignments.end());
    file_layer.assignments = std::move(ds.assignments);
    ds.assignments.clear();
    append(file_layer, std::move(ds));
  }

  // Structural problems (unknown keys, duplicates) and value problems are reported in one pass.
  JobBuilder builder;
  builder.errors() = std::move(file_layer.errors);
  // Highest precedence first, so a value a higher layer overrides is never compared within its own.
  for (const auto& a : cli_layer) builder.apply(a, Layer::CommandLine);
  for (const auto& a : env_layer) builder.apply(a, Layer::Environment);
  for (const auto& a : file_layer.assignments) builder.apply(a, Layer::File);
  throw_if(builder.errors());
  if (file_layer.batch) apply_batch_constraint(*file_layer.batch, builder, builder.errors());
  throw_if(builder.errors());
  // model.from_pretrained: the folder's config.json fills the model section (runtime/hf).
  if (!builder.job().model.from_pretrained.empty())
    hf::apply_from_pretrained(builder, options.check_paths, builder.errors());
  throw_if(builder.errors());

  // The one-key backend switch: the other block's settings become this backend's. Validation runs
  // on the result, so a translated value that cannot work is reported naming its source key.
  auto translated = translate_backend(builder.job(), builder.sources(), builder.job().backend);
  std::vector<Diagnostic> errors;
  if (options.gpus_here) resolve_placement(translated.job, translated.sources, *options.gpus_here, errors);
  throw_if(errors);
  validate_job(translated.job, translated.sources, options.check_paths, errors, file_layer.warnings);
  throw_if(errors);

  loaded.job = std::move(translated.job);
  loaded.sources = std::move(translated.sources);
  loaded.translation = std::move(translated.translation);
  loaded.warnings = std::move(file_layer.warnings);
  loaded.notes = std::move(file_layer.notes);
  for (const auto& [foreign, key] : file_layer.auto_keys) {
    const FieldSpec* field = find_field(key);
    auto source = loaded.sources.find(key);
    const std::string from = source == loaded.sources.end() || source->second.origin == Location::Origin::Default
                                 ? "accel's default"
                                 : source->second.str();
    loaded.notes.push_back(foreign + ": \"auto\" -> " + key + ": " +
                           (field ? value_to_yaml(field->get(loaded.job)) : std::string("?")) + " (" + from + ")");
  }
  return loaded;
}

}  // namespace

LoadedJob load_job(const LoadOptions& options) {
  try {
    return load_job_unguarded(options);
  } catch (const YAML::Exception& e) {
    // Readers check node types before reading, so this is a missed case; it still owes the user a
    // configuration error (exit 2) naming the file. No line: the mark may be in a file it names.
    Location where = options.file.empty() ? Location::derived("--set and ACCEL_* overrides")
                                          : Location::in_file(options.file, 0, 0);
    throw ConfigError(Diagnostic{"", where, std::string(kUnguardedReadMessage) + e.msg, "", "",
                                 "a list, mapping or single value is where another is expected; please report "
                                 "this message, the reader should have named the key"});
  }
}

}  // namespace accel::config
