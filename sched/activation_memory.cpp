#include "sched/activation_memory.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>

#include "config/derived.h"
#include "config/model_family.h"
#include "sched/planner.h"
#include "sched/slot_reuse.h"

namespace troupe::sched {

int32_t activation_slots(ParallelConfig::Schedule kind, int32_t in_flight, int32_t microbatches) {
  if (kind == ParallelConfig::GPIPE) return microbatches;
  return std::max(1, std::min(microbatches, in_flight + 1));
}

namespace {

// The shapes one layer of the stage works on (the formula in the header).
struct Shape {
  int64_t B, T, n, r, D, Dt, Ft, NHt, hs, KVl, TP;
  bool rms_norm, grouped_query, swiglu;  // the model family's (config/model_family.h)
};

Shape shape_of(const Config& c) {
  const auto& m = c.model();
  Shape s{};
  s.TP = c.parallel().tensor();
  s.B = c.batch().micro_batch_size();
  s.T = c.batch().seq_length();
  s.n = s.B * s.T;
  s.r = c.parallel().sequence_parallel() && s.TP > 1 ? s.n / s.TP : s.n;
  s.D = m.width();
  s.Dt = s.D / s.TP;
  s.Ft = config::ffn_width(m) / s.TP;
  s.NHt = m.heads() / s.TP;
  s.hs = config::head_size(m);
  const int64_t kv = config::kv_heads(m);
  s.KVl = kv % s.TP != 0 ? 1 : kv / s.TP;
  const config::ModelFamily& family = config::model_family(m);
  s.rms_norm = family.rms_norm;
  s.grouped_query = family.grouped_query;
  s.swiglu = family.swiglu;
  return s;
}

int64_t norm_floats(const Shape& s) { return s.rms_norm ? s.r : 2 * s.r; }
int64_t qkv_width(const Shape& s) { return s.grouped_query ? (s.NHt + 2 * s.KVl) * s.hs : 3 * s.Dt; }
int64_t att_floats(const Shape& s) { return s.B * s.NHt * s.T * s.T; }
// The attention backward's scratch per token: dqkv, and the gradient of its heads'
// output [NHt hs] beside it when that is wider than the model (a Llama's head_dim).
int64_t attention_scratch(const Shape& s) {
  return qkv_width(s) + (s.grouped_query && s.NHt * s.hs > s.D ? s.NHt * s.hs : 0);
}

int64_t layer_floats(const Shape& s, bool selective) {
  const int64_t attention = s.n * qkv_width(s) + (selective ? 0 : att_floats(s)) + s.n * s.NHt * s.hs;
  const int64_t mlp = (s.swiglu ? (selective ? 2 : 3) : (selective ? 1 : 2)) * s.n * s.Ft;
  return 2 * s.n * s.D + s.r * s.D + 2 * norm_floats(s) + attention + mlp;
}

}  // namespace

StageActivations stage_activations(const Config& c, int32_t stage, const PipelineSchedule& schedule) {
  const auto& m = c.model();
  const int32_t p = c.parallel().pipeline();
  const int32_t v = std::max(1, schedule.chunks);
  if (p < 1 || m.layers() % (p * v) != 0)
    throw std::invalid_argument("model.layers " + std::to_string(m.layers()) + " do not split into parallel.pipeline " +
                                std::to_string(p) + (v > 1 ? " x " + std::to_string(v) + " virtual" : std::string()) +
                                " equal stages");
  if (stage < 0 || stage >= p || size_t(stage) >= schedule.ops.size())
    throw std::invalid_argument("pipeline stage " + std::to_string(stage) + " is outside [0, " + std::to_string(p) +
                                ")");
  const Shape s = shape_of(c);
  const bool selective = m.recompute() == ModelConfig::SELECTIVE;
  StageActivations a;
  a.stage = stage;
  a.layers = m.layers() / p;
  a.chunks = v;
  // Per chunk (the whole stage with one chunk); BLOCK recomputes the first
  // recompute_num_layers of each chunk.
  const int32_t L = a.layers / v;
  if (m.recompute() != ModelConfig::FULL)
    a.stored_layers = L;
  else if (m.recompute_method() == ModelConfig::UNIFORM)
    a.stored_layers = 0;
  else
    a.stored_layers = L - std::min(L, std::max(0, m.recompute_num_layers()));
  a.in_flight = peak_in_flight(schedule.ops[size_t(stage)]);
  // GPipe and 1F1B by their rule; the interleaved schedule's wrap-around and ZB_H1's
  // weight passes (a slot stays taken past its backward) by the proof of slot_reuse.h.
  if (v == 1 && c.parallel().schedule() != ParallelConfig::ZB_H1)
    a.chunk_slots = {activation_slots(c.parallel().schedule(), a.in_flight, schedule.microbatches)};
  else
    a.chunk_slots = chunk_activation_slots(schedule, stage);
  a.slots = 0;
  for (const int32_t n : a.chunk_slots) a.slots += n;
  const bool first = stage == 0, last = stage == p - 1;

  const int64_t layer = layer_floats(s, selective);
  // ZB_H1's split backward keeps each deferred weight GEMM's output gradient in the
  // slot (docs/compute.md, "Split backward"): per layer the attention's n D + its qkv
  // gradient, the MLP's n D + (GELU) n Ft; the first stage's embedding gradient n D.
  int64_t deferred = 0;
  if (c.parallel().schedule() == ParallelConfig::ZB_H1)
    deferred = L * (s.n * s.D + s.n * qkv_width(s) + s.n * s.D + (s.swiglu ? 0 : s.n * s.Ft)) + (first ? s.n * s.D : 0);
  a.deferred_bytes = 4 * deferred;
  const int64_t chunk_slot = (L + 1) * s.r * s.D + a.stored_layers * layer + 5 * s.n + deferred;  // + token ints, loss mask
  const int64_t head = last ? s.n * s.D + norm_floats(s) + s.n * (config::padded_vocab(c) / s.TP) + 2 * s.n : 0;
  a.layer_bytes = 4 * layer;
  a.slot_bytes = 4 * (chunk_slot + head);  // the largest slot: the last chunk's
  for (int32_t ch = 0; ch < v; ++ch)
    a.saved_total_bytes += int64_t(a.chunk_slots[size_t(ch)]) * 4 * (chunk_slot + (ch == v - 1 ? head : 0));

  // The scratch the slots share (GptStage's scratch_): dres and small [n, D], big
  // [n, widest layer scratch], then hidden dropout's masked rows, the selective
  // recompute buffer (attention probabilities or an MLP activation, the larger) and
  // full recomputation's replay of one layer (its saved floats and its output).
  int64_t width = 3 * s.TP;
  if (L > 0) width = std::max({width, attention_scratch(s), s.Ft});
  int64_t scratch = 2 * s.n * s.D + s.n * width;
  if (m.hidden_dropout() > 0) scratch += s.n * s.D;
  if (selective && L > 0) scratch += std::max(att_floats(s), s.n * s.Ft);
  if (a.stored_layers < L) scratch += layer_floats(s, false) + s.r * s.D;
  // Each slot's input gradient (every chunk but the first stage's chunk 0).
  const int32_t handing_back = first ? a.slots - a.chunk_slots.front() : a.slots;
  scratch += int64_t(handing_back) * s.n * s.D;
  a.scratch_bytes = 4 * scratch;
  return a;
}

std::vector<StageActivations> activation_plan(const Config& c) {
  const int32_t p = c.parallel().pipeline();
  const auto schedule = build_pipeline_schedule(c);
  std::vector<StageActivations> out;
  for (int32_t k = 0; k < p; ++k) out.push_back(stage_activations(c, k, schedule));
  return out;
}

std::string RecomputeChoice::str() const {
  if (mode == ModelConfig::NONE) return "none";
  if (mode == ModelConfig::SELECTIVE) return "selective";
  return "full " + std::to_string(layers) + " layer" + (layers == 1 ? "" : "s");
}

Config RecomputeChoice::applied_to(const Config& c, int32_t stage_layers) const {
  Config out = c;
  auto* m = out.mutable_model();
  m->set_recompute(mode);
  if (mode == ModelConfig::FULL) {
    m->set_recompute_method(layers >= stage_layers ? ModelConfig::UNIFORM : ModelConfig::BLOCK);
    m->set_recompute_num_layers(layers);
  }
  return out;
}

std::vector<StageFit> fit_recompute(const Config& c, double gpu_bytes) {
  const int32_t p = c.parallel().pipeline();
  const auto schedule = build_pipeline_schedule(c);
  const double per = params_per_gpu(c);
  const int dp = c.parallel().data();
  const double main = c.parallel().distributed_optimizer() ? per * (8.0 + 8.0 / dp) : per * 16.0;
  // FULL BLOCK counts layers per model chunk (all of a stage's with one chunk).
  const int32_t L = c.model().layers() / std::max(1, p) / std::max(1, schedule.chunks);
  std::vector<RecomputeChoice> candidates{{ModelConfig::NONE, 0}, {ModelConfig::SELECTIVE, 0}};
  for (int32_t k = 1; k <= L; ++k) candidates.push_back({ModelConfig::FULL, k});
  std::vector<StageFit> out;
  for (int32_t stage = 0; stage < p; ++stage) {
    StageFit f;
    f.stage = stage;
    f.main_state_bytes = main;
    for (const auto& choice : candidates) {
      const StageActivations a = stage_activations(choice.applied_to(c, L), stage, schedule);
      const double total = main + double(a.saved_bytes()) + double(a.scratch_bytes);
      f.choice = choice;
      f.activations = a;
      f.total_bytes = total;
      if (total <= gpu_bytes) {
        f.fits = true;
        break;
      }
    }
    out.push_back(f);
  }
  return out;
}

double parse_memory_size(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw std::invalid_argument("memory size '" + text + "' is not a number with an optional unit (GB, GiB, MB, MiB)");
  }
  std::string unit = text.substr(used);
  unit.erase(std::remove_if(unit.begin(), unit.end(), [](unsigned char ch) { return std::isspace(ch); }), unit.end());
  for (auto& ch : unit) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KB") scale = 1e3;
  else if (unit == "MB") scale = 1e6;
  else if (unit == "GB") scale = 1e9;
  else if (unit == "TB") scale = 1e12;
  else if (unit == "KIB") scale = 1024.0;
  else if (unit == "MIB") scale = 1024.0 * 1024;
  else if (unit == "GIB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "TIB") scale = 1024.0 * 1024 * 1024 * 1024;
  else
    throw std::invalid_argument("memory size '" + text + "': unknown unit '" + text.substr(used) +
                                "' (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)");
  if (!std::isfinite(value) || value <= 0)
    throw std::invalid_argument("memory size '" + text + "' is not positive");
  return value * scale;
}

}  // namespace troupe::sched
