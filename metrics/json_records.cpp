#include "metrics/json_records.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>

#include "metrics/error.h"

namespace troupe::metrics {

std::string hex16(uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

std::optional<uint64_t> parse_hex16(const std::string& text) {
  if (text.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (const char ch : text) {
    const int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = v << 4 | uint64_t(d);
  }
  return v;
}

Json json_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

double number_from_json(const Json& v, const char* field) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s == "nan") return std::nan("");
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
  }
  throw MetricsError(std::string("field \"") + field + "\": expected a number or \"nan\"/\"inf\"/\"-inf\", got " +
                     v.dump());
}

Json to_json(const StartupRecord& r) {
  Json j = {{"type", "startup"},
            {"time", r.wall_time},
            {"config_path", r.config_path},
            {"run_dir", r.run_dir},
            {"parameters", r.parameters},
            {"data_parallel", r.data_parallel},
            {"pipeline_parallel", r.pipeline_parallel},
            {"tensor_parallel", r.tensor_parallel},
            {"global_batch_size", r.global_batch_size},
            {"seq_length", r.seq_length},
            {"microbatches_per_replica", r.microbatches_per_replica},
            {"train_steps", r.train_steps},
            {"actor_paths", r.actor_paths}};
  j["resumed_from_step"] = r.resumed_from_step ? Json(*r.resumed_from_step) : Json(nullptr);
  j["skip_samples"] = r.skip_samples;
  if (!r.blend.empty()) {
    Json blend = Json::array();
    for (const auto& [prefix, weight] : r.blend) blend.push_back({{"prefix", prefix}, {"weight", json_number(weight)}});
    j["blend"] = std::move(blend);
  }
  return j;
}

namespace {

// The step's "memory": one object per stage rank (docs/metrics.md, "Memory").
Json memory_json(const std::vector<StageMemoryRecord>& stages) {
  Json out = Json::array();
  for (const auto& m : stages)
    out.push_back({{"stage", m.stage},
                   {"peak", m.peak()},
                   {"weights", m.weights},
                   {"gradients", m.gradients},
                   {"optimizer_state", m.optimizer_state},
                   {"activations", m.activations},
                   {"scratch", m.scratch},
                   {"planned_activations", m.planned_activations}});
  return out;
}

}  // namespace

Json to_json(const StepRecord& r) {
  Json j = {{"type", "step"},
          {"time", r.wall_time},
          {"step", r.step},
          {"consumed_samples", r.consumed_samples},
          {"loss", json_number(r.loss)},
          {"lr", json_number(r.lr)},
          {"grad_norm", json_number(r.grad_norm)},
          {"clipped", r.clipped},
          {"skipped", r.skipped},
          {"tokens_per_s", json_number(tokens_per_second(r))},
          {"input_tokens", r.input_tokens},
          {"loss_tokens", r.loss_tokens},
          {"padding_tokens", r.padding_tokens},
          {"step_time_s", json_number(r.step_time_s)},
          {"restarts", r.restarts},
          {"recomputed", r.recomputed},
          {"samples_hash", r.samples_hash ? Json(hex16(*r.samples_hash)) : Json(nullptr)},
          {"skipped_samples", r.skipped_samples}};
  if (!r.stage_memory.empty()) j["memory"] = memory_json(r.stage_memory);
  if (!r.datasets.empty()) {
    Json list = Json::array();
    for (const auto& d : r.datasets)
      list.push_back({{"prefix", d.prefix},
                      {"samples", d.samples},
                      {"tokens", d.tokens},
                      {"consumed_samples", d.consumed_samples},
                      {"consumed_tokens", d.consumed_tokens}});
    j["datasets"] = std::move(list);
  }
  return j;
}

Json to_json(const EvalRecord& r) {
  Json j = {{"type", "eval"},
            {"time", r.wall_time},
            {"step", r.step},
            {"consumed_samples", r.consumed_samples},
            {"loss", json_number(r.loss)},
            {"samples", r.samples},
            {"loss_tokens", r.loss_tokens},
            {"time_s", json_number(r.time_s)}};
  if (!r.datasets.empty()) {
    Json list = Json::array();
    for (const auto& d : r.datasets)
      list.push_back({{"prefix", d.prefix},
                      {"loss", json_number(d.loss)},
                      {"samples", d.samples},
                      {"loss_tokens", d.loss_tokens}});
    j["datasets"] = std::move(list);
  }
  return j;
}

Json to_json(const FailureRecord& r) {
  Json j = {{"type", "failure"}, {"time", r.wall_time}, {"step", r.step},   {"actor", r.actor},
            {"phase", r.phase},  {"reason", r.reason},  {"action", r.action}, {"restarts", r.restarts}};
  j["resume_step"] = r.resume_step ? Json(*r.resume_step) : Json(nullptr);
  return j;
}

Json to_json(const RunSummary& r) {
  Json j = {{"type", "summary"},
            {"time", r.wall_time},
            {"status", r.status},
            {"steps", r.steps},
            {"skipped_steps", r.skipped_steps},
            {"clipped_steps", r.clipped_steps},
            {"consumed_samples", r.consumed_samples},
            {"skipped_samples", r.skipped_samples},
            {"input_tokens", r.input_tokens},
            {"loss_tokens", r.loss_tokens},
            {"padding_tokens", r.padding_tokens},
            {"first_loss", json_number(r.first_loss)},
            {"last_loss", json_number(r.last_loss)},
            {"elapsed_s", json_number(r.elapsed_s)},
            {"train_time_s", json_number(r.train_time_s)},
            {"tokens_per_s", json_number(tokens_per_second(r))},
            {"restarts", r.restarts},
            {"spikes", r.spikes},
            {"rollbacks", r.rollbacks}};
  j["last_eval_loss"] = r.last_eval_loss ? json_number(*r.last_eval_loss) : Json(nullptr);
  j["error"] = r.error.empty() ? Json(nullptr) : Json(r.error);
  j["newest_checkpoint"] = r.newest_checkpoint.empty() ? Json(nullptr) : Json(r.newest_checkpoint);
  return j;
}

namespace {

const Json& field(const Json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end()) throw MetricsError(std::string("step record: missing field \"") + name + "\"");
  return *it;
}

template <class T>
T typed(const Json& j, const char* name) {
  const Json& v = field(j, name);
  bool ok = std::is_same_v<T, bool> ? v.is_boolean() : v.is_number_integer();
  if (!ok)
    throw MetricsError(std::string("step record: field \"") + name + "\": expected " +
                       (std::is_same_v<T, bool> ? "true/false" : "an integer") + ", got " + v.dump());
  return v.get<T>();
}

}  // namespace

StepRecord step_from_json(const Json& j) {
  if (!j.is_object() || j.value("type", "") != "step")
    throw MetricsError("step record: expected an object with \"type\": \"step\", got " + j.dump().substr(0, 80));
  StepRecord r;
  r.wall_time = number_from_json(field(j, "time"), "time");
  r.step = typed<int64_t>(j, "step");
  r.consumed_samples = typed<int64_t>(j, "consumed_samples");
  r.loss = number_from_json(field(j, "loss"), "loss");
  r.lr = number_from_json(field(j, "lr"), "lr");
  r.grad_norm = number_from_json(field(j, "grad_norm"), "grad_norm");
  r.clipped = typed<bool>(j, "clipped");
  r.skipped = typed<bool>(j, "skipped");
  r.input_tokens = typed<int64_t>(j, "input_tokens");
  r.loss_tokens = typed<int64_t>(j, "loss_tokens");
  r.padding_tokens = typed<int64_t>(j, "padding_tokens");
  r.step_time_s = number_from_json(field(j, "step_time_s"), "step_time_s");
  r.restarts = typed<int64_t>(j, "restarts");
  r.recomputed = typed<bool>(j, "recomputed");
  // Written since data.skip_samples; absent (or null) in older files.
  if (const auto h = j.find("samples_hash"); h != j.end() && !h->is_null()) {
    const auto v = h->is_string() ? parse_hex16(h->get<std::string>()) : std::nullopt;
    if (!v) throw MetricsError("step record: field \"samples_hash\": expected 16 hex digits, got " + h->dump());
    r.samples_hash = *v;
  }
  if (const auto k = j.find("skipped_samples"); k != j.end()) {
    if (!k->is_array()) throw MetricsError("step record: field \"skipped_samples\": expected a list, got " + k->dump());
    for (const auto& id : *k) {
      if (!id.is_number_integer())
        throw MetricsError("step record: field \"skipped_samples\": expected integers, got " + id.dump());
      r.skipped_samples.push_back(id.get<int64_t>());
    }
  }
  // Written with a blend (data.blend) only.
  if (const auto ds = j.find("datasets"); ds != j.end()) {
    if (!ds->is_array()) throw MetricsError("step record: field \"datasets\": expected a list, got " + ds->dump());
    for (const auto& d : *ds) {
      if (!d.is_object() || !d.contains("prefix") || !d["prefix"].is_string())
        throw MetricsError("step record: field \"datasets\": expected objects with a \"prefix\", got " + d.dump());
      r.datasets.push_back({d["prefix"].get<std::string>(), typed<int64_t>(d, "samples"), typed<int64_t>(d, "tokens"),
                            typed<int64_t>(d, "consumed_samples"), typed<int64_t>(d, "consumed_tokens")});
    }
  }
  // Written since the memory ledger; absent in older files.
  if (const auto mem = j.find("memory"); mem != j.end()) {
    if (!mem->is_array()) throw MetricsError("step record: field \"memory\": expected a list, got " + mem->dump());
    for (const auto& m : *mem) {
      if (!m.is_object() || !m.contains("stage") || !m["stage"].is_string())
        throw MetricsError("step record: field \"memory\": expected objects with a \"stage\", got " + m.dump());
      StageMemoryRecord x;
      x.stage = m["stage"].get<std::string>();
      int64_t peak = 0;
      try {
        x.weights = typed<int64_t>(m, "weights");
        x.gradients = typed<int64_t>(m, "gradients");
        x.optimizer_state = typed<int64_t>(m, "optimizer_state");
        x.activations = typed<int64_t>(m, "activations");
        x.scratch = typed<int64_t>(m, "scratch");
        x.planned_activations = typed<int64_t>(m, "planned_activations");
        peak = typed<int64_t>(m, "peak");
      } catch (const MetricsError& e) {
        throw MetricsError("step record: memory of " + x.stage + ": " + std::string(e.what()).substr(13));
      }
      if (peak != x.peak())
        throw MetricsError("step record: memory of " + x.stage + ": \"peak\" is not the sum of its five parts");
      r.stage_memory.push_back(std::move(x));
    }
  }
  return r;
}

}  // namespace troupe::metrics
