// The communicator groups of a (dp, pp, tp) layout for ranks that live in different
// processes, connected through Gloo. Mirrors engine::make_inprocess_comms: the same
// groups under the same names, plus the pipeline-neighbour pairs that carry
// activations and gradients between stages.
//
// Global rank index: (d * pp + p) * tp + t (engine::Topology::index). Group names:
//   dp[pp{p}/tp{t}]        data parallel: members d = 0..dp-1
//   tp[dp{d}/pp{p}]        tensor parallel: members t = 0..tp-1
//   pp[dp{d}/tp{t}]:{p}-{p+1}   pipeline neighbours: member 0 is stage p, member 1 stage p+1
//   embedding[dp{d}/tp{t}] first and last stage (tied embeddings), only when pp > 1
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/gloo_communicator.h"

namespace troupe::comm {

enum class GroupKind { kDataParallel, kTensorParallel, kPipelineNeighbours, kEmbedding };
const char* group_kind_name(GroupKind k);  // "DP", "TP", "PP", "embedding"

struct GroupSpec {
  GroupKind kind;
  std::string name;
  std::vector<int> members;  // global rank indices, in group-rank order
};

// Every group of the layout (groups of one member included), in the one order in
// which all processes connect them: connecting in a common order is what keeps the
// rendezvous free of deadlock. Throws CommError when a dimension is below 1.
std::vector<GroupSpec> layout_groups(int dp, int pp, int tp);

// The communicators of one global rank.
struct GlooRankComms {
  std::shared_ptr<Communicator> data_parallel;    // always (one member when dp = 1)
  std::shared_ptr<Communicator> tensor_parallel;  // always (one member when tp = 1)
  std::shared_ptr<Communicator> embedding;        // first or last stage with pp > 1, else null
  std::shared_ptr<Communicator> pipeline_prev;    // with stage p-1 (this rank is member 1), or null
  std::shared_ptr<Communicator> pipeline_next;    // with stage p+1 (this rank is member 0), or null
  // Every communicator above with its group, in connection order.
  std::vector<std::pair<GroupSpec, std::shared_ptr<Communicator>>> all;
  void abort_all(const std::string& why) const;
};

// Connects the groups that global rank `rank` belongs to, in layout_groups order, each
// under `prefix` (fresh per job and generation) + "/" + its name. Blocks until every
// member of each group arrived (or options.timeout runs out: CommError).
GlooRankComms connect_rank_comms(int dp, int pp, int tp, int rank, Store& store, const std::string& prefix,
                                 const GlooOptions& options);

// The same for several ranks hosted by one process (a worker with several slots): one
// thread per rank, so that groups joining two of them can meet. Element i belongs to
// ranks[i]. Throws the first rank's error after every thread has finished.
std::vector<GlooRankComms> connect_ranks_comms(int dp, int pp, int tp, const std::vector<int>& ranks, Store& store,
                                               const std::string& prefix, const GlooOptions& options);

}  // namespace troupe::comm
