// The network check behind `supervisor commcheck`, in the manner of nccl-tests: run
// all-reduce, reduce-scatter, all-gather and send/recv over a sweep of message sizes
// on one communicator group, verify every element of every iteration exactly
// (integer-valued floats, whose sums are exact in fp32), and time each size.
//
// Conventions (nccl-tests): size = bytes of the whole buffer (count floats);
// time = the slowest member's time for one operation, median over the iterations;
// algbw = size / time; busbw = algbw x 2(n-1)/n for all-reduce, x (n-1)/n for
// reduce-scatter and all-gather, x 1 for send/recv; n = members of the group.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/gloo_communicator.h"
#include "comm/gloo_groups.h"

namespace troupe::comm {

enum class CheckOp { kAllReduce, kReduceScatter, kAllGather, kSendRecv };
inline constexpr CheckOp kCheckOps[] = {CheckOp::kAllReduce, CheckOp::kReduceScatter, CheckOp::kAllGather,
                                        CheckOp::kSendRecv};
const char* check_op_name(CheckOp op);          // "all_reduce", "reduce_scatter", ...
CheckOp parse_check_op(const std::string& name);  // inverse; std::invalid_argument otherwise
// How a Gloo communicator with `reduction` carries out `op` among `members`.
std::string check_algorithm(CheckOp op, GlooReduction reduction, int members);
double bus_factor(CheckOp op, int members);

// Counts (floats) from 1 up to max_count, each `factor` times the previous; the last is
// max_count itself. Empty when max_count is 0.
std::vector<size_t> sweep_counts(size_t max_count, size_t factor);

// Timed iterations for one size: enough to give a median, bounded in total bytes.
int check_iterations(size_t bytes, bool full);

struct CheckRow {
  CheckOp op;
  size_t count = 0;      // floats in the whole buffer
  int iterations = 0;    // timed (after warm-up)
  double median_s = 0;   // median over iterations of the slowest member's time
  uint64_t wrong = 0;    // wrong elements, all members and iterations together
};

// Every member of `c` calls this with the same arguments. Runs each op over `counts`,
// verifying every result; the timings and wrong-element counts are combined over the
// group with collectives on `c` itself, so every member returns the same rows.
// Throws CommError when the group fails.
// `iterations` > 0 replaces check_iterations() (tests keep it short).
std::vector<CheckRow> run_group_check(Communicator& c, const std::vector<size_t>& counts, bool full,
                                      int iterations = 0);

// What one process checks for a whole (dp, pp, tp) layout.
struct LayoutCheck {
  int dp = 1, pp = 1, tp = 1;
  std::map<GroupKind, size_t> max_count;  // largest message (floats) per kind of group
  size_t factor = 16;                     // between successive sizes
  bool full = false;                      // more iterations and warm-ups
  int iterations = 0;                     // > 0: timed iterations per size (else check_iterations)
  GlooOptions options;                    // of every group
  // Of the "world" group that lines the processes up between groups: it waits while
  // other groups run, so it needs the whole check's time.
  std::chrono::milliseconds world_timeout{600000};
};

struct GroupRows {
  std::string phase;  // "alone" or "concurrent"
  GroupSpec group;
  std::vector<CheckRow> rows;
};

// Global rank `rank`'s part of the check: connects a world group and the groups of
// the layout (under prefix), then runs every group of more than one member alone, in
// layout order (the other processes wait), then all of them at once (one thread per
// group here). Returns the rows of the groups this rank leads (group member 0).
// Throws CommError when anything fails.
std::vector<GroupRows> run_layout_check(const LayoutCheck& check, int rank, Store& store, const std::string& prefix);

}  // namespace troupe::comm
