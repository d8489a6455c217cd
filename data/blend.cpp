#include "data/blend.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace troupe::data {

namespace {

// numpy's pairwise_sum for float64 (numpy/core/src/umath/loops_utils.h.src).
double pairwise_sum(const double* a, size_t n) {
  constexpr size_t kBlock = 128;
  if (n < 8) {
    double res = 0.;
    for (size_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= kBlock) {
    double r[8];
    for (size_t j = 0; j < 8; ++j) r[j] = a[j];
    size_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (size_t j = 0; j < 8; ++j) r[j] += a[i + j];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  size_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

}  // namespace

double numpy_sum(const std::vector<double>& v) { return pairwise_sum(v.data(), v.size()); }

std::vector<double> megatron_normalize(const std::vector<double>& weights) {
  const double sum = numpy_sum(weights);
  std::vector<double> out(weights.size());
  for (size_t i = 0; i < weights.size(); ++i) out[i] = weights[i] / sum;
  return out;
}

// choices[i]: the dataset of position i, for i < choices.size().
// checkpoints[k * D + d]: taken_d(k * every); every = 64 (D + 1) positions, so the counts
// cost about an eighth of a byte a position whatever D, and a lookup scans under every.
// taken: taken_d(choices.size()).
// The caller of each method holds mu.
struct BlendOrder::Table {
  std::mutex mu;
  std::vector<double> weights;  // the rule's, normalized twice
  int64_t every = 0;
  std::vector<uint16_t> choices;
  std::vector<int64_t> checkpoints;
  std::vector<int64_t> taken;

  // Extends the table until it holds `position`.
  void grow(int64_t position) {
    const size_t D = weights.size();
    if (int64_t(choices.size()) > position) return;
    const int64_t target = std::max<int64_t>(position + 1, std::max<int64_t>(int64_t(choices.size()) * 2, 1 << 16));
    choices.reserve(size_t(target));
    for (int64_t i = int64_t(choices.size()); i < target; ++i) {
      if (i % every == 0) checkpoints.insert(checkpoints.end(), taken.begin(), taken.end());
      // Megatron's loop body, term for term (compiled without FMA contraction: the
      // product is rounded before the subtraction, as megatron-core's helper does, which
      // decides its ties; data/CMakeLists.txt).
      const double x = std::max(double(i), 1.0);
      size_t best = 0;
      double best_error = weights[0] * x - double(taken[0]);
      for (size_t d = 1; d < D; ++d) {
        const double error = weights[d] * x - double(taken[d]);
        if (error > best_error) {
          best_error = error;
          best = d;
        }
      }
      choices.push_back(uint16_t(best));
      ++taken[best];
    }
  }

  // taken_d(position) for a position the table holds (or its end).
  int64_t taken_before(size_t d, int64_t position) const {
    const int64_t k = position / every;
    int64_t n = checkpoints[size_t(k) * weights.size() + d];
    for (int64_t i = k * every; i < position; ++i) n += choices[size_t(i)] == d;
    return n;
  }
};

namespace {

// One table per blend in a process: every loader, the coordinator and the evaluation of
// a run read the same order, so they share it (2 bytes a position read so far) instead
// of each growing its own. Keyed by the weights the rule uses; kept while one holds it.
std::shared_ptr<BlendOrder::Table> shared_table(const std::vector<double>& weights) {
  static std::mutex mu;
  static std::map<std::vector<double>, std::weak_ptr<BlendOrder::Table>> tables;
  std::lock_guard lock(mu);
  for (auto it = tables.begin(); it != tables.end();)  // forget the released ones
    it = it->second.expired() ? tables.erase(it) : std::next(it);
  if (auto t = tables[weights].lock()) return t;
  auto t = std::make_shared<BlendOrder::Table>();
  t->weights = weights;
  t->every = 64 * (int64_t(weights.size()) + 1);
  t->taken.assign(weights.size(), 0);
  tables[weights] = t;
  return t;
}

}  // namespace

BlendOrder::BlendOrder(const std::vector<double>& weights) : raw_(weights) {
  if (weights.empty() || weights.size() >= 32767)
    throw std::invalid_argument("a blend needs 1 to 32766 datasets, not " + std::to_string(weights.size()));
  for (const double w : weights)
    if (!(w > 0) || !std::isfinite(w))
      throw std::invalid_argument("a blend's weights must be finite and positive, not " + std::to_string(w));
  weights_ = megatron_normalize(megatron_normalize(weights));
  table_ = shared_table(weights_);
}

int BlendOrder::datasets() const { return int(weights_.size()); }
const std::vector<double>& BlendOrder::weights() const { return weights_; }

int BlendOrder::dataset_at(int64_t position) const { return choice_at(position).dataset; }

std::vector<int64_t> BlendOrder::taken_before(int64_t position) const {
  if (position < 0) throw std::out_of_range("blend: negative position " + std::to_string(position));
  std::lock_guard lock(table_->mu);
  table_->grow(position);
  std::vector<int64_t> out(weights_.size());
  for (size_t d = 0; d < out.size(); ++d) out[d] = table_->taken_before(d, position);
  return out;
}

BlendOrder::Choice BlendOrder::choice_at(int64_t position) const {
  if (position < 0) throw std::out_of_range("blend: negative position " + std::to_string(position));
  std::lock_guard lock(table_->mu);
  table_->grow(position);
  const int d = table_->choices[size_t(position)];
  return {d, table_->taken_before(size_t(d), position)};
}

int64_t BlendOrder::first_position_beyond(int dataset, int64_t count) const {
  if (dataset < 0 || dataset >= datasets()) throw std::out_of_range("blend: no dataset " + std::to_string(dataset));
  if (count < 0) return 0;
  const size_t D = weights_.size();
  std::lock_guard lock(table_->mu);
  Table& t = *table_;
  // The share of a positive weight grows without bound, so this ends.
  while (t.taken[size_t(dataset)] <= count) t.grow(int64_t(t.choices.size()));
  // The last checkpoint at or below count, then a scan.
  int64_t lo = 0, hi = int64_t(t.checkpoints.size() / D) - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (t.checkpoints[size_t(mid) * D + size_t(dataset)] <= count) lo = mid;
    else hi = mid - 1;
  }
  int64_t taken = t.checkpoints[size_t(lo) * D + size_t(dataset)];
  for (int64_t i = lo * t.every;; ++i) {
    if (t.choices[size_t(i)] == dataset) {
      if (taken == count) return i;
      ++taken;
    }
  }
}

std::vector<int64_t> BlendOrder::megatron_dataset_sizes(int64_t samples, double surplus) const {
  const std::vector<double> w = megatron_normalize(raw_);
  std::vector<int64_t> out;
  for (const double x : w) out.push_back(int64_t(std::ceil(std::ceil(double(samples) * x) * (1 + surplus))));
  return out;
}

std::string describe_blend(const std::string& name, const std::vector<BlendEntry>& datasets, int64_t samples) {
  std::vector<double> raw;
  for (const auto& d : datasets) raw.push_back(d.weight);
  const BlendOrder order(raw);
  const auto taken = order.taken_before(samples);
  const auto megatron = order.megatron_dataset_sizes(samples);
  std::string out = fmt::format("{}: {} datasets, Megatron's BlendedDataset rule over {} samples\n", name,
                                datasets.size(), samples);
  for (size_t d = 0; d < datasets.size(); ++d)
    out += fmt::format("  {:>2}  {:<40} weight {:<8g} ({:.6f})  {:>12} samples ({:.4f}); Megatron builds {}\n", d,
                       datasets[d].prefix, datasets[d].weight, order.weights()[d], taken[d],
                       samples > 0 ? double(taken[d]) / double(samples) : 0.0, megatron[d]);
  return out;
}

}  // namespace troupe::data
