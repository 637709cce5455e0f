// Text table and JSON for a job's memory estimate (see memory_report.hpp).
#include "runtime/estimate/memory_report.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "runtime/common/human_bytes.hpp"

namespace accel::estimate {
namespace {

constexpr size_t kWrap = 100;

const char* kActivationFormula = "s*b*h*(34 + 5*a*s/h) bytes per layer with 16-bit activations";
// On a GPU the built-in models' attention is torch's fused kernel, which keeps no a x s x s scores:
// only its output and the softmax's log-sum-exp (fp32, one per row).
const char* kFusedAttentionFormula =
    "s*b*h*34 + 4*b*a*s bytes per layer with 16-bit activations (fused attention keeps no s x s scores)";
const char* activation_formula(const ActivationHint& a) {
  return a.fused_attention ? kFusedAttentionFormula : kActivationFormula;
}
const char* kActivationSource = "Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer "
                                "Models, eq. 2: no recomputation, no tensor parallelism";
const char* kPaperSource = "Rajbhandari et al. 2020, ZeRO: Memory Optimizations Toward Training Trillion Parameter "
                           "Models, mixed-precision Adam, K = 12";

std::string sharding_name(Sharding s) {
  switch (s) {
    case Sharding::replicated: return "replicated";
    case Sharding::optimizer: return "optimizer";
    case Sharding::gradients: return "gradients";
    case Sharding::parameters: return "parameters";
  }
  return "?";
}

std::string cell(int64_t bytes) { return bytes == 0 ? "-" : human_bytes(bytes); }

// A figure like "27.0 MiB" must not break across lines: its space becomes kGlue until wrap() is done.
constexpr char kGlue = '\x01';
std::string glued(std::string text) {
  std::replace(text.begin(), text.end(), ' ', kGlue);
  return text;
}

// Word-wraps `text` at kWrap columns; continuation lines get `indent`.
std::string wrap(const std::string& text, const std::string& indent) {
  std::istringstream words(text);
  std::string word, line, out;
  while (words >> word) {
    if (!line.empty() && line.size() + 1 + word.size() > kWrap) {
      out += line + "\n";
      line = indent;
    }
    line += (line.empty() || line == indent ? "" : " ") + word;
  }
  out += line + "\n";
  std::replace(out.begin(), out.end(), kGlue, ' ');
  return out;
}

bool params_in_files(const MemoryEstimate& m) {
  return m.plan.sharding == Sharding::parameters && m.plan.param_offload == Placement::nvme;
}

std::string offloaded_cell(const MemoryEstimate& m) {
  if (params_in_files(m))
    return "nvme " + human_bytes(m.nvme) + (m.unit_buffers_estimated ? " + host " + human_bytes(m.host) : "");
  switch (m.plan.offload) {
    case Placement::device: return "-";
    case Placement::cpu: return "cpu " + human_bytes(m.host);
    case Placement::nvme:
      return "nvme " + human_bytes(m.nvme) + (m.unit_buffers_estimated ? " + host " + human_bytes(m.host) : "");
  }
  return "?";
}

std::string units_line(const JobEstimate& e) {
  const MemoryInput& in = e.input;
  std::string out = group_digits(in.num_parameters()) + " parameters";
  if (!in.units_known()) {
    if (in.unit_params > 0) out += "; largest unit (--unit-params) " + group_digits(in.unit_params);
    return out;
  }
  out += " in " + std::to_string(in.unit_numels.size()) + " units";
  int largest = -1;  // among the units other than the tied one
  for (int u = 0; u < int(in.unit_numels.size()); ++u)
    if (u != in.tied_unit && (largest < 0 || in.unit_numels[size_t(u)] > in.unit_numels[size_t(largest)])) largest = u;
  if (largest >= 0)
    out += "; largest " + e.unit_names[size_t(largest)] + " (" + group_digits(in.unit_numels[size_t(largest)]) + ")";
  if (in.tied_unit >= 0)
    out += "; tied, kept gathered: " + e.unit_names[size_t(in.tied_unit)] + " (" +
           group_digits(in.unit_numels[size_t(in.tied_unit)]) + ")";
  return out;
}

}  // namespace

std::string group_digits(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (value < 0 ? "-" : "") + out;
}

std::string render_memory_table(const JobEstimate& e) {
  std::ostringstream s;
  s << "Model-state memory per rank (parameters, gradients, optimizer) in accel's layout\n";
  s << "  model      " << e.model << "\n";
  s << "             " << units_line(e) << "\n";
  s << "  world      " << e.world << " process" << (e.world == 1 ? "" : "es") << " on " << e.num_machines
    << " machine" << (e.num_machines == 1 ? "" : "s") << " (N = " << e.world << " shards";
  if (e.num_machines > 1) s << "; HYBRID_SHARD: N = " << e.world / e.num_machines << " per machine";
  s << "), device " << e.device << "\n";
  s << "  precision  " << e.precision << "\n";
  s << "  optimizer  " << e.optimizer << "\n\n";

  const std::vector<std::string> head = {"strategy", "N", "params", "grads", "optimizer", "live",
                                         "per rank", "offloaded", "step peak", "ZeRO paper"};
  std::vector<std::vector<std::string>> rows;
  for (const auto& m : e.strategies) {
    const bool on_device = m.plan.offload == Placement::device;
    rows.push_back({m.plan.name, std::to_string(m.plan.shards), cell(m.params + (params_in_files(m) ? 0 : m.param_shard)),
                    cell(m.grads + (on_device ? m.grad_shard : 0)),
                    cell(on_device ? m.master + m.optimizer_states : 0),
                    m.unit_buffers_estimated ? cell(m.live_params + m.live_grads) : "n/a", human_bytes(m.device),
                    offloaded_cell(m), m.plan.step ? human_bytes(m.peak) : "n/a", human_bytes(m.zero_paper)});
  }
  std::vector<size_t> width(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const auto& r : rows) width[c] = std::max(width[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& r, const char* mark) {
    s << "  " << mark << " ";
    for (size_t c = 0; c < r.size(); ++c) {
      bool left = c == 0 || c == 7;  // names and the offload text read left to right; figures align right
      s << (left ? std::left : std::right) << std::setw(int(width[c])) << r[c] << (c + 1 < r.size() ? "  " : "");
    }
    s << "\n";
  };
  line(head, " ");
  for (size_t i = 0; i < rows.size(); ++i) line(rows[i], int(i) == e.configured ? "*" : " ");
  const MemoryEstimate& own = e.strategies[size_t(e.configured)];
  s << "\n  * this job: " << e.configured_label << " (" << own.plan.name << ")";
  if (own.plan.step) s << "; step peak at " << own.peak_phase;
  s << "\n\n";

  s << wrap("Columns are bytes per rank on the compute device: params = replicated parameters; grads = replicated "
            "gradients + the fp32 gradient shard; optimizer = fp32 master weights + optimizer states; live = "
            "unit-sized buffers alive at once (zero-1: the all-gather that refreshes the parameters after the step; "
            "zero-2: the root's gradient (it holds the tied embedding) + the largest unit's reduce-scatter buffer; "
            "zero-3: the units kept gathered are in params, the others gathered at once in live); offloaded = what "
            "offload moves to host memory (cpu) or to files (nvme, plus its host staging buffers). Flat buffers are "
            "padded per unit to a multiple of N. Live buffers come from a replay of two micro-steps on the job's "
            "schedule (prefetch, reduce bucket, live bounds). step peak = device and host memory together at the "
            "step's fullest moment: the model states held in memory plus, in backward, the gathered units, "
            "gradient buffers and reduce-scatter outputs alive together, the tied embedding's gradient copies "
            "(three of V x C at the embedding's backward), the activations and freed unit blocks kept for reuse; or, "
            "in the optimizer step, its temporaries and nvme buffers. A CPU run's peak resident set is this plus "
            "the runtime's own (libtorch, the communicator: 150-200 MiB measured on CPU ranks).",
            "")
    << "\n";
  s << wrap(std::string("ZeRO paper: ") + kPaperSource + ": 16, 4 + 12/N, 2 + 14/N and 16/N bytes per parameter. "
                "accel differs: it keeps the gradient shard in fp32 (4/N, not 2/N) so accumulating micro-steps loses "
                "no precision; fp32 runs hold 4-byte parameters and gradients, and at zero-1/2 (SHARD_GRAD_OP) without "
                "offload their master shard is the parameters' own slice, stepped in place (no second copy); zero-1 keeps the full replicated gradient beside its shard; padding and live buffers are not "
                "in the paper.",
            "")
    << "\n";
  const ActivationHint& a = e.activations;
  std::string act = std::string("Activations (in the step peak, not in the per-rank column): roughly ") +
                    activation_formula(a) + " (" + kActivationSource + ")";
  if (a.available)
    act += "; with s = " + std::to_string(a.seq_len) + ", b = " + std::to_string(a.micro_batch_size) + ", h = " +
           std::to_string(a.n_embd) + ", a = " + std::to_string(a.n_head) + ": " + glued(human_bytes(a.per_layer_bytes)) +
           " per layer, " + glued(human_bytes(a.total_bytes)) + " for " + std::to_string(a.n_layer) +
           " layers (about twice that in fp32).";
  if (a.available && a.recomputed)
    act += " With fsdp.activation_checkpointing each layer keeps only its input (2*s*b*h bytes) and one layer's "
           "activations exist during its recompute: about " + glued(human_bytes(a.recomputed_total_bytes)) + ".";
  else if (!a.available)
    act += ".";
  s << wrap(act, "");
  if (!e.notes.empty()) s << "\n";
  for (const auto& n : e.notes) s << wrap("note: " + n, "      ");
  return s.str();
}

nlohmann::json memory_estimate_json(const JobEstimate& e) {
  using nlohmann::json;
  const MemoryInput& in = e.input;
  json units = json::array();
  for (size_t u = 0; u < in.unit_numels.size(); ++u)
    units.push_back({{"name", e.unit_names[u]}, {"numel", in.unit_numels[u]}});
  json model = {{"description", e.model},
                {"parameters", in.num_parameters()},
                {"units_known", in.units_known()},
                {"units", units},
                {"tied_unit", in.tied_unit >= 0 ? json(e.unit_names[size_t(in.tied_unit)]) : json(nullptr)},
                {"unit_params", in.unit_params}};
  json strategies = json::array();
  for (const auto& m : e.strategies) {
    strategies.push_back({{"name", m.plan.name},
                          {"sharding", sharding_name(m.plan.sharding)},
                          {"zero_stage", int(m.plan.sharding)},
                          {"shards", m.plan.shards},
                          {"offload", to_string(m.plan.offload)},
                          {"param_offload", to_string(m.plan.param_offload)},
                          {"configured", m.plan.configured},
                          {"unit_buffers_estimated", m.unit_buffers_estimated},
                          {"bytes",
                           {{"params", m.params},
                            {"param_shard", m.param_shard},
                            {"grads", m.grads},
                            {"grad_shard", m.grad_shard},
                            {"master", m.master},
                            {"optimizer_states", m.optimizer_states},
                            {"live_params", m.live_params},
                            {"live_grads", m.live_grads},
                            {"device", m.device},
                            {"host", m.host},
                            {"nvme", m.nvme},
                            {"zero_paper", m.zero_paper},
                            {"transients", m.transients},
                            {"peak", m.peak}}},
                          {"peak_phase", m.peak_phase}});
  }
  const ActivationHint& a = e.activations;
  json activations = {{"estimated", false}, {"formula", activation_formula(a)}, {"source", kActivationSource}};
  if (a.available) {
    activations["seq_len"] = a.seq_len;
    activations["micro_batch_size"] = a.micro_batch_size;
    activations["n_embd"] = a.n_embd;
    activations["n_head"] = a.n_head;
    activations["n_layer"] = a.n_layer;
    activations["per_layer_16bit_bytes"] = a.per_layer_bytes;
    activations["total_16bit_bytes"] = a.total_bytes;
    activations["recomputed"] = a.recomputed;
    if (a.recomputed) activations["recomputed_total_16bit_bytes"] = a.recomputed_total_bytes;
  }
  return {{"model", model},
          {"world", e.world},
          {"num_machines", e.num_machines},
          {"device", e.device},
          {"precision", e.precision},
          {"param_bytes", in.param_bytes},
          {"replicated_master", in.replicated_master},
          {"optimizer", e.optimizer},
          {"optimizer_state_bytes", in.state_bytes},
          {"max_live_units", in.max_live_units},
          {"nvme_buffer_count", in.nvme_buffer_count},
          {"configured", {{"strategy", e.strategies[size_t(e.configured)].plan.name}, {"label", e.configured_label}}},
          {"strategies", strategies},
          {"zero_paper", kPaperSource},
          {"activations", activations},
          {"notes", e.notes}};
}

}  // namespace accel::estimate
