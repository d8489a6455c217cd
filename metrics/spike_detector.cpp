#include "metrics/spike_detector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

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

double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t n = values.size(), mid = n / 2;
  std::nth_element(values.begin(), values.begin() + long(mid), values.end());
  const double upper = values[mid];
  if (n % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + long(mid));
  return 0.5 * (lower + upper);
}

SpikeDetector::SpikeDetector(SpikeOptions options) : options_(options) {
  if (options_.window < 1) throw MetricsError("spike detector: window must be at least 1, got " + std::to_string(options_.window));
  if (!(options_.multiple > 1.0))
    throw MetricsError("spike detector: multiple must be greater than 1, got " + std::to_string(options_.multiple));
  if (options_.min_history < 1 || options_.min_history > options_.window)
    throw MetricsError("spike detector: min_history must be in [1, window=" + std::to_string(options_.window) +
                       "], got " + std::to_string(options_.min_history));
}

double SpikeDetector::median() const { return median_of({window_.begin(), window_.end()}); }

void SpikeDetector::remember(int64_t step, uint64_t content_hash) { seen_.emplace(content_hash, step); }

std::optional<SpikeRecord> SpikeDetector::observe(const StepDetail& d) {
  const bool finite = std::isfinite(d.loss);
  const double med = median();
  const int used = int(window_.size());
  const bool judged = used >= options_.min_history;
  const bool spike = !finite || (judged && d.loss > options_.multiple * med);
  if (finite) {
    window_.push_back(d.loss);
    if (int(window_.size()) > options_.window) window_.pop_front();
  }
  if (!spike) return std::nullopt;

  SpikeRecord r;
  r.step = d.step;
  r.loss = d.loss;
  r.median = med;
  r.ratio = med > 0 ? d.loss / med : NAN;
  r.window_used = used;
  r.non_finite = !finite;
  r.grad_norm = d.grad_norm;
  r.lr = d.lr;
  r.microbatches = d.microbatches;
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
  Json j = {{"type", "spike"},
                      {"step", r.step},
                      {"loss", json_number(r.loss)},
                      {"median", json_number(r.median)},
                      {"ratio", json_number(r.ratio)},
                      {"window_used", r.window_used},
                      {"non_finite", r.non_finite},
                      {"grad_norm", json_number(r.grad_norm)},
                      {"lr", json_number(r.lr)},
                      {"sample_ids", r.sample_ids},
                      {"content_hash", hash},
                      {"microbatches", mbs}};
  j["repeat_of_step"] = r.repeat_of_step ? Json(*r.repeat_of_step) : Json(nullptr);
  return j;
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
