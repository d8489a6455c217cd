#include "comm/gloo_check.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <thread>

#include "util/thread_group.h"

namespace troupe::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Member q's input element i in iteration k: small integers, so that any sum over a
// group of fewer than 2^24 / 100 members is exact in fp32 in any order.
float input(size_t i, int q, int k) { return float((i * 7 + size_t(q) * 13 + size_t(k) * 3) % 101); }
float sum_over(size_t i, int n, int k) {
  float s = 0;
  for (int q = 0; q < n; ++q) s += input(i, q, k);
  return s;
}

// One timed run of `op` on `count` floats in iteration k; returns wrong elements.
class OpRunner {
 public:
  OpRunner(Communicator& c, CheckOp op, size_t count)
      : c_(c), op_(op), n_(c.size()), r_(c.rank()), count_(count), mine_(chunk_range(count, n_, r_)) {
    switch (op) {
      case CheckOp::kAllReduce: a_.resize(count); break;
      case CheckOp::kReduceScatter: a_.resize(count), b_.resize(mine_.size()); break;
      case CheckOp::kAllGather: a_.resize(mine_.size()), b_.resize(count); break;
      case CheckOp::kSendRecv: a_.resize(count), b_.resize(count); break;
    }
  }

  void prepare(int k) {
    switch (op_) {
      case CheckOp::kAllReduce:
      case CheckOp::kReduceScatter:
      case CheckOp::kSendRecv:
        for (size_t i = 0; i < count_; ++i) a_[i] = input(i, r_, k);
        break;
      case CheckOp::kAllGather:
        for (size_t i = 0; i < mine_.size(); ++i) a_[i] = input(mine_.begin + i, r_, k);
        break;
    }
    std::fill(b_.begin(), b_.end(), -1.0f);
  }

  void run() {
    switch (op_) {
      case CheckOp::kAllReduce: c_.all_reduce_sum(a_); break;
      case CheckOp::kReduceScatter: c_.reduce_scatter_sum(a_, b_); break;
      case CheckOp::kAllGather: c_.all_gather(a_, b_); break;
      case CheckOp::kSendRecv:
        // Two members exchange; more shift around the ring (each sends to the next).
        c_.send(a_, next(), kTag);
        c_.recv(b_, prev(), kTag);
        break;
    }
  }

  uint64_t wrong(int k) const {
    uint64_t bad = 0;
    switch (op_) {
      case CheckOp::kAllReduce:
        for (size_t i = 0; i < count_; ++i) bad += a_[i] != sum_over(i, n_, k);
        break;
      case CheckOp::kReduceScatter:
        for (size_t i = 0; i < mine_.size(); ++i) bad += b_[i] != sum_over(mine_.begin + i, n_, k);
        break;
      case CheckOp::kAllGather:
        for (int q = 0; q < n_; ++q) {
          const Chunk cq = chunk_range(count_, n_, q);
          for (size_t i = cq.begin; i < cq.end; ++i) bad += b_[i] != input(i, q, k);
        }
        break;
      case CheckOp::kSendRecv:
        for (size_t i = 0; i < count_; ++i) bad += b_[i] != input(i, prev(), k);
        break;
    }
    return bad;
  }

 private:
  static constexpr int kTag = 77;
  int next() const { return (r_ + 1) % n_; }
  int prev() const { return (r_ + n_ - 1) % n_; }

  Communicator& c_;
  const CheckOp op_;
  const int n_, r_;
  const size_t count_;
  const Chunk mine_;
  std::vector<float> a_, b_;
};

}  // namespace

const char* check_op_name(CheckOp op) {
  switch (op) {
    case CheckOp::kAllReduce: return "all_reduce";
    case CheckOp::kReduceScatter: return "reduce_scatter";
    case CheckOp::kAllGather: return "all_gather";
    case CheckOp::kSendRecv: return "send_recv";
  }
  return "?";
}

CheckOp parse_check_op(const std::string& name) {
  for (CheckOp op : kCheckOps)
    if (name == check_op_name(op)) return op;
  throw std::invalid_argument("unknown operation '" + name + "'");
}

std::string check_algorithm(CheckOp op, GlooReduction reduction, int members) {
  switch (op) {
    case CheckOp::kAllReduce:
      return reduction == GlooReduction::kRing ? "Gloo ring" : "rank-order RS+AG";
    case CheckOp::kReduceScatter: return "direct, rank order";
    case CheckOp::kAllGather: return "direct";
    case CheckOp::kSendRecv: return members == 2 ? "exchange" : "ring shift";
  }
  return "?";
}

double bus_factor(CheckOp op, int members) {
  const double n = members;
  switch (op) {
    case CheckOp::kAllReduce: return 2.0 * (n - 1) / n;
    case CheckOp::kReduceScatter:
    case CheckOp::kAllGather: return (n - 1) / n;
    case CheckOp::kSendRecv: return 1.0;
  }
  return 1.0;
}

std::vector<size_t> sweep_counts(size_t max_count, size_t factor) {
  std::vector<size_t> out;
  if (max_count == 0) return out;
  factor = std::max<size_t>(factor, 2);
  for (size_t c = 1; c < max_count; c *= factor) out.push_back(c);
  out.push_back(max_count);
  return out;
}

int check_iterations(size_t bytes, bool full) {
  const double budget = full ? 1024.0 * (1 << 20) : 32.0 * (1 << 20);
  const double want = budget / double(std::max<size_t>(bytes, 1));
  return full ? int(std::clamp(want, 10.0, 40.0)) : int(std::clamp(want, 3.0, 10.0));
}

std::vector<CheckRow> run_group_check(Communicator& c, const std::vector<size_t>& counts, bool full,
                                      int iterations) {
  std::vector<CheckRow> rows;
  const int n = c.size();
  if (n < 2) return rows;  // nothing crosses a process
  const int warmup = full ? 3 : 1;
  for (CheckOp op : kCheckOps)
    for (size_t count : counts) {
      OpRunner runner(c, op, count);
      const int iters = iterations > 0 ? iterations : check_iterations(count * sizeof(float), full);
      std::vector<float> times;
      uint64_t wrong = 0;
      for (int k = 0; k < warmup + iters; ++k) {
        runner.prepare(k);
        c.barrier();
        const auto t0 = Clock::now();
        runner.run();
        const float s = std::chrono::duration<float>(Clock::now() - t0).count();
        wrong += runner.wrong(k);
        if (k >= warmup) times.push_back(s);
      }
      // The group's time per iteration is its slowest member's.
      std::vector<float> all(size_t(n) * size_t(iters));
      c.all_gather(times, all);
      std::vector<float> slowest(iters, 0.0f);
      for (int q = 0; q < n; ++q)
        for (int k = 0; k < iters; ++k) slowest[k] = std::max(slowest[k], all[size_t(q) * iters + k]);
      std::sort(slowest.begin(), slowest.end());
      std::vector<float> bad{float(std::min<uint64_t>(wrong, 1u << 24))};
      c.all_reduce_sum(bad);
      rows.push_back({op, count, iters, double(slowest[iters / 2]), uint64_t(bad[0])});
    }
  return rows;
}

std::vector<GroupRows> run_layout_check(const LayoutCheck& check, int rank, Store& store, const std::string& prefix) {
  const int ranks = check.dp * check.pp * check.tp;
  GlooOptions world_options = check.options;
  world_options.timeout = check.world_timeout;
  auto world = connect_gloo(store, prefix, "world", rank, ranks, world_options);
  const GlooRankComms mine = connect_rank_comms(check.dp, check.pp, check.tp, rank, store, prefix, check.options);
  const auto counts_for = [&](GroupKind k) {
    const auto it = check.max_count.find(k);
    return sweep_counts(it == check.max_count.end() ? 0 : it->second, check.factor);
  };
  const auto leads = [&](const GroupSpec& g) { return g.members.front() == rank; };

  std::vector<GroupRows> out;
  // Alone: one group at a time, everyone else waiting at the world barrier.
  for (const auto& g : layout_groups(check.dp, check.pp, check.tp)) {
    if (g.members.size() < 2) continue;
    world->barrier();
    for (const auto& [spec, c] : mine.all)
      if (spec.name == g.name) {
        auto rows = run_group_check(*c, counts_for(g.kind), check.full, check.iterations);
        if (leads(g)) out.push_back({"alone", g, std::move(rows)});
      }
  }
  world->barrier();

  // Concurrent: every group at once.
  std::vector<std::vector<CheckRow>> rows(mine.all.size());
  std::vector<std::exception_ptr> errors(mine.all.size());
  util::run_on_threads(int(mine.all.size()), "checking the groups at once", [&](int t) {
    const size_t i = size_t(t);
    if (mine.all[i].first.members.size() < 2) return;
    try {
      rows[i] = run_group_check(*mine.all[i].second, counts_for(mine.all[i].first.kind), check.full,
                                check.iterations);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  });
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (size_t i = 0; i < mine.all.size(); ++i)
    if (mine.all[i].first.members.size() >= 2 && leads(mine.all[i].first))
      out.push_back({"concurrent", mine.all[i].first, std::move(rows[i])});
  world->barrier();
  return out;
}

}  // namespace troupe::comm
