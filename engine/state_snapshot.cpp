#include "engine/state_snapshot.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace troupe::engine {
namespace {

// Stores `value` under `name`, or checks it equals what an earlier copy stored.
void put_or_check(std::map<std::string, std::vector<float>>& out, const std::string& name,
                  std::vector<float> value, const std::string& where) {
  auto [it, inserted] = out.try_emplace(name, std::move(value));
  if (inserted) return;
  if (it->second.size() != value.size() ||
      std::memcmp(it->second.data(), value.data(), value.size() * sizeof(float)) != 0)
    throw std::runtime_error(fmt::format("{}: copies of {} differ", where, name));
}

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
      auto slice = [&](const std::vector<float>& buf) {
        return std::vector<float>(buf.begin() + tensor.offset, buf.begin() + tensor.offset + tensor.numel);
      };
      put_or_check(out.params, tensor.name, slice(s->params), where);
      // A tied copy's moments are updated from the same summed gradient: equal too.
      put_or_check(out.exp_avg, tensor.name, slice(m), where);
      put_or_check(out.exp_avg_sq, tensor.name, slice(v), where);
    }
  }
  return out;
}

}  // namespace troupe::engine
