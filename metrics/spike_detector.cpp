#include "metrics/spike_detector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "metrics/error.h"
#include "metrics/json_records.h"
#include "metrics/jsonl_log.h"

namespace troupe::metrics {

uint64_t sample_content_hash(std::vector<int64_t> sample_ids) {
  std::sort(sample_ids.begin(), sample_ids.end());
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64 offset basis
  for (int64_t id : sample_ids) {
    const uint64_t u = uint64_t(id);
    for (int b = 0; b < 8; ++b) {
      h ^= (u >> (8 * b)) & 0xff;
      h *= 0x100000001b3ull;  // FNV-1a 64 prime
    }
  }
  return h;
}

std::vector<DocumentLoss> worst_documents(std::vector<DocumentLoss> documents, size_t n) {
  std::stable_sort(documents.begin(), documents.end(),
                   [](const DocumentLoss& a, const DocumentLoss& b) { return a.loss_mean() > b.loss_mean(); });
  if (documents.size() > n) documents.resize(n);
  return documents;
}

SpikeDetector::SpikeDetector(SpikeOptions options)
    : options_(options), losses_(options.window), norms_(options.window) {
  if (options_.window < 1) throw MetricsError("spike detector: window must be at least 1, got " + std::to_string(options_.window));
  if (options_.min_history < 1 || options_.min_history > options_.window)
    throw MetricsError("spike detector: min_history must be in [1, window=" + std::to_string(options_.window) +
                       "], got " + std::to_string(options_.min_history));
  const auto check = [](const char* what, double v) {
    if (!(std::isfinite(v) && v >= 0))
      throw MetricsError(std::string("spike detector: ") + what + " must be finite and not negative, got " +
                         std::to_string(v));
  };
  check("mad_k", options_.mad_k);
  check("loss_min_jump", options_.loss_min_jump);
  check("grad_norm_min_jump", options_.grad_norm_min_jump);
}

void SpikeDetector::warm(double loss, double grad_norm) {
  losses_.add(loss);
  norms_.add(grad_norm);
}

void SpikeDetector::remember(int64_t step, uint64_t content_hash) { seen_.emplace(content_hash, step); }

std::optional<SpikeRecord> SpikeDetector::observe(const StepDetail& d) {
  const bool loss_finite = std::isfinite(d.loss), norm_finite = std::isfinite(d.grad_norm);
  const int used = int(losses_.size());
  const auto loss = losses_.judge(d.loss, options_.mad_k, options_.loss_min_jump);
  const auto norm = norms_.judge(d.grad_norm, options_.mad_k, options_.grad_norm_min_jump);
  // Each series is judged once its own window holds min_history values (a non-finite
  // value leaves it out of one window only).
  const bool loss_judged = used >= options_.min_history;
  const bool norm_judged = int(norms_.size()) >= options_.min_history;
  const bool loss_spike = !loss_finite || (loss_judged && loss.exceeds);
  const bool norm_spike = !norm_finite || (norm_judged && norm.exceeds);
  losses_.add(d.loss);
  norms_.add(d.grad_norm);
  if (!loss_spike && !norm_spike) return std::nullopt;

  SpikeRecord r;
  r.step = d.step;
  r.loss = d.loss;
  r.median = loss.median;
  r.ratio = loss.ratio;
  r.loss_mad = loss.mad;
  r.window_used = used;
  r.non_finite = !loss_finite || !norm_finite;
  if (loss_spike) r.triggers.push_back("loss");
  if (norm_spike) r.triggers.push_back("grad_norm");
  r.grad_norm = d.grad_norm;
  r.grad_norm_median = norm.median;
  r.grad_norm_mad = norm.mad;
  r.grad_norm_ratio = norm.ratio;
  r.lr = d.lr;
  r.clipped = d.clipped;
  r.stage_grad_norms = d.stage_grad_norms;
  r.layer_grad_norms = d.layer_grad_norms;
  r.microbatches = d.microbatches;
  r.documents = d.documents;
  r.top_documents = worst_documents(d.documents, kTopDocuments);
  r.update_norm = d.update_norm;
  r.weight_norm = d.weight_norm;
  // A ratio needs weights: with all-zero ones (or none counted) it stays unset.
  if (d.update_norm && d.weight_norm && *d.weight_norm > 0) r.update_weight_ratio = *d.update_norm / *d.weight_norm;
  for (const auto& mb : d.microbatches) r.sample_ids.insert(r.sample_ids.end(), mb.sample_ids.begin(), mb.sample_ids.end());
  std::sort(r.sample_ids.begin(), r.sample_ids.end());
  r.content_hash = sample_content_hash(r.sample_ids);
  auto [it, inserted] = seen_.emplace(r.content_hash, d.step);
  if (!inserted) r.repeat_of_step = it->second;
  return r;
}

Json to_json(const SpikeRecord& r) {
  char hash[24];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(r.content_hash));
  Json mbs = Json::array();
  for (const auto& mb : r.microbatches)
    mbs.push_back({{"replica", mb.replica},
                   {"index", mb.index},
                   {"sample_ids", mb.sample_ids},
                   {"loss", json_number(mb.loss)},
                   {"loss_tokens", mb.loss_tokens}});
  auto documents = [](const std::vector<DocumentLoss>& docs) {
    Json out = Json::array();
    for (const auto& d : docs)
      out.push_back({{"dataset", d.dataset},
                     {"document", d.document},
                     {"samples", d.samples},
                     {"loss_sum", json_number(d.loss_sum)},
                     {"loss_tokens", d.loss_tokens},
                     {"loss_mean", json_number(d.loss_mean())}});
    return out;
  };
  auto optional = [](const std::optional<double>& v) { return v ? json_number(*v) : Json(nullptr); };
  Json stages = Json::array();
  for (double n : r.stage_grad_norms) stages.push_back(json_number(n));
  Json layers = Json::object();
  for (const auto& [name, n] : r.layer_grad_norms) layers[name] = json_number(n);
  Json j = {{"type", "spike"},
            {"step", r.step},
            {"loss", json_number(r.loss)},
            {"median", json_number(r.median)},
            {"ratio", json_number(r.ratio)},
            {"loss_mad", json_number(r.loss_mad)},
            {"window_used", r.window_used},
            {"non_finite", r.non_finite},
            {"triggers", r.triggers},
            {"grad_norm", json_number(r.grad_norm)},
            {"grad_norm_median", json_number(r.grad_norm_median)},
            {"grad_norm_mad", json_number(r.grad_norm_mad)},
            {"grad_norm_ratio", json_number(r.grad_norm_ratio)},
            {"stage_grad_norms", stages},
            {"layer_grad_norms", layers},
            {"lr", json_number(r.lr)},
            {"clipped", r.clipped},
            {"sample_ids", r.sample_ids},
            {"content_hash", hash},
            {"microbatches", mbs},
            {"top_documents", documents(r.top_documents)},
            {"documents", documents(r.documents)}};
  j["update_norm"] = optional(r.update_norm);
  j["weight_norm"] = optional(r.weight_norm);
  j["update_weight_ratio"] = optional(r.update_weight_ratio);
  j["repeat_of_step"] = r.repeat_of_step ? Json(*r.repeat_of_step) : Json(nullptr);
  return j;
}

namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// "loss 5.6200 is 1.85x the running median 3.0400", "grad norm nan (not finite)".
std::string series_text(const char* name, double value, double ratio, double median, const char* median_name) {
  if (!std::isfinite(value)) return std::string(name) + " " + fixed(value, 0) + " (not finite)";
  std::string s = std::string(name) + " " + fixed(value, 4);
  if (std::isfinite(ratio)) s += " is " + fixed(ratio, 2) + "x";
  else s += " against";
  return s + " " + median_name + " " + fixed(median, 4);
}

}  // namespace

std::string spike_line(const SpikeRecord& r, const std::string& spikes_path) {
  std::string triggers, detail;
  for (const auto& t : r.triggers) {
    if (!triggers.empty()) triggers += ", ";
    triggers += t;
    if (!detail.empty()) detail += ", ";
    detail += t == "loss" ? series_text("loss", r.loss, r.ratio, r.median, "the running median")
                          : series_text("grad norm", r.grad_norm, r.grad_norm_ratio, r.grad_norm_median, "its median");
  }
  std::string line = "spike at step " + std::to_string(r.step) + " (" + triggers + "): " + detail;
  if (r.repeat_of_step) line += " (same samples as step " + std::to_string(*r.repeat_of_step) + ")";
  if (!r.top_documents.empty()) {
    const DocumentLoss& w = r.top_documents.front();
    line += "; worst document " + std::to_string(w.document) + " (dataset " + std::to_string(w.dataset) +
            "): mean loss " + fixed(w.loss_mean(), 4) + " over " + std::to_string(w.loss_tokens) + " tokens";
  }
  return line + "; recorded in " + spikes_path;
}

int64_t warm_spike_windows(const std::vector<Json>& metrics_lines, int64_t through_step, SpikeDetector& detector) {
  std::map<int64_t, std::pair<double, double>> steps;  // the last line of each step number
  for (const auto& j : metrics_lines) {
    if (j.value("type", "") != "step") continue;
    const StepRecord r = step_from_json(j);
    if (r.step <= through_step) steps[r.step] = {r.loss, r.grad_norm};
  }
  const size_t skip = steps.size() > size_t(detector.options().window) ? steps.size() - size_t(detector.options().window) : 0;
  size_t k = 0;
  for (const auto& [step, v] : steps)
    if (k++ >= skip) detector.warm(v.first, v.second);
  return int64_t(steps.size() - skip);
}

void load_spike_history(const std::string& path, SpikeDetector& detector) {
  if (!std::filesystem::exists(path)) return;
  const JsonlContents contents = read_jsonl(path);
  int64_t line = 0;
  for (const auto& j : contents.objects) {
    ++line;
    const auto step = j.find("step");
    const auto hash = j.find("content_hash");
    if (j.value("type", "") != "spike" || step == j.end() || !step->is_number_integer() || hash == j.end() ||
        !hash->is_string())
      throw MetricsError(path + ": object " + std::to_string(line) +
                         ": expected a spike record with integer \"step\" and string \"content_hash\"");
    const std::string& text = hash->get_ref<const std::string&>();
    char* end = nullptr;
    const unsigned long long value = std::strtoull(text.c_str(), &end, 16);
    if (text.size() != 16 || end != text.c_str() + text.size())
      throw MetricsError(path + ": object " + std::to_string(line) + ": content_hash \"" + text +
                         "\" is not 16 hex digits");
    detector.remember(step->get<int64_t>(), uint64_t(value));
  }
}

}  // namespace troupe::metrics
