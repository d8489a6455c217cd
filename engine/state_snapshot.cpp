#include "engine/state_snapshot.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace troupe::engine {
namespace {

// Whole tensors assembled from the boxes (tensor-parallel slices, or whole tensors)
// that stages hold: each element is written once; a second copy of an element (a
// replica on another tensor-parallel rank, the tied wte of the last stage) must agree
// bitwise.
class Assembler {
 public:
  explicit Assembler(std::map<std::string, std::vector<float>>& out) : out_(out) {}

  void put(const model::ParamTensor& t, const float* box, const std::string& where) {
    auto& g = global_[t.name];
    int64_t numel = 1;
    for (int64_t d : t.global_shape) numel *= d;
    if (g.values.empty()) {
      g.shape = t.global_shape;
      g.values.assign(size_t(numel), 0.0f);
      g.covered.assign(size_t(numel), 0);
    } else if (g.shape != t.global_shape) {
      throw std::runtime_error(fmt::format("{}: {} has another global shape than an earlier copy", where, t.name));
    }
    const int64_t rows = t.shape[0], cols = t.shape.size() == 2 ? t.shape[1] : 1;
    const int64_t gcols = t.global_shape.size() == 2 ? t.global_shape[1] : 1;
    const int64_t c0 = t.shape.size() == 2 ? t.slice_start[1] : 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const size_t gi = size_t((t.slice_start[0] + r) * gcols + c0 + c);
        const float v = box[r * cols + c];
        if (g.covered[gi] && std::memcmp(&g.values[gi], &v, sizeof(float)) != 0)
          throw std::runtime_error(fmt::format("{}: copies of {} differ (element {})", where, t.name, gi));
        g.values[gi] = v;
        g.covered[gi] = 1;
      }
  }

  // Moves every complete tensor to `out`; throws naming a tensor with elements no stage held.
  void finish() {
    for (auto& [name, g] : global_) {
      const auto missing = std::count(g.covered.begin(), g.covered.end(), uint8_t(0));
      if (missing) throw std::runtime_error(fmt::format("{}: {} elements held by no stage", name, missing));
      out_[name] = std::move(g.values);
    }
    global_.clear();
  }

 private:
  struct Global {
    std::vector<int64_t> shape;
    std::vector<float> values;
    std::vector<uint8_t> covered;
  };
  std::map<std::string, std::vector<float>>& out_;
  std::map<std::string, Global> global_;
};

}  // namespace

NamedState assemble_state(const Topology& t, const std::vector<StageSnapshot>& stages,
                          const std::vector<OptimSnapshot>& shards) {
  NamedState out;
  // Stage buffers per (pp, tp): replicas must agree bitwise.
  std::map<std::pair<int, int>, const StageSnapshot*> by_stage;
  for (const auto& s : stages) {
    auto [it, inserted] = by_stage.try_emplace({s.rank.pp, s.rank.tp}, &s);
    if (!inserted && (it->second->params.size() != s.params.size() ||
                      std::memcmp(it->second->params.data(), s.params.data(),
                                  s.params.size() * sizeof(float)) != 0))
      throw std::runtime_error(fmt::format("{} and {} hold different parameters",
                                           stage_path(it->second->rank), stage_path(s.rank)));
  }
  if (int(by_stage.size()) != t.pp * t.tp)
    throw std::runtime_error(fmt::format("snapshots cover {} of {} stages", by_stage.size(), t.pp * t.tp));

  Assembler params(out.params), exp_avg(out.exp_avg), exp_avg_sq(out.exp_avg_sq);
  bool first_shard = true;
  for (const auto& [key, s] : by_stage) {
    const size_t n = s->params.size();
    // Moments of this stage: the shards of every replica, each covering its range.
    std::vector<float> m(n), v(n);
    std::vector<int> cover(n, 0);
    for (const auto& sh : shards) {
      if (sh.rank.pp != key.first || sh.rank.tp != key.second) continue;
      if (first_shard) out.adam_steps = sh.adam_steps, first_shard = false;
      if (sh.adam_steps != out.adam_steps)
        throw std::runtime_error(fmt::format("{} has taken {} Adam steps, others {}",
                                             optim_path(sh.rank), sh.adam_steps, out.adam_steps));
      const auto b = size_t(sh.range.begin), len = size_t(sh.range.end - sh.range.begin);
      if (sh.range.end > int64_t(n) || sh.exp_avg.size() != len || sh.exp_avg_sq.size() != len)
        throw std::runtime_error(fmt::format("{}: range [{}, {}) does not fit its stage of {}",
                                             optim_path(sh.rank), sh.range.begin, sh.range.end, n));
      std::copy(sh.exp_avg.begin(), sh.exp_avg.end(), m.begin() + b);
      std::copy(sh.exp_avg_sq.begin(), sh.exp_avg_sq.end(), v.begin() + b);
      for (size_t i = b; i < b + len; ++i) ++cover[i];
    }
    // Without a distributed optimizer every replica owns the whole range: any
    // positive, equal coverage is complete.
    if (n > 0 && (cover[0] == 0 || std::any_of(cover.begin(), cover.end(), [&](int c) { return c != cover[0]; })))
      throw std::runtime_error(fmt::format("optimizer shards of stage pp{}/tp{} do not cover it evenly",
                                           key.first, key.second));
    const auto where = fmt::format("stage pp{}/tp{}", key.first, key.second);
    for (const auto& tensor : s->tensors) {
      params.put(tensor, s->params.data() + tensor.offset, where);
      // A tied or replicated copy's moments come from the same gradient: equal too.
      exp_avg.put(tensor, m.data() + tensor.offset, where);
      exp_avg_sq.put(tensor, v.data() + tensor.offset, where);
    }
  }
  params.finish();
  exp_avg.finish();
  exp_avg_sq.finish();
  return out;
}

}  // namespace troupe::engine
