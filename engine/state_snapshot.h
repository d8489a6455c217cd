// Copies of a run's training state taken from its actors, and their assembly into
// whole named tensors: what tests compare against the single-device reference and
// what checkpoint writers persist.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/topology.h"
#include "model/param_registry.h"

namespace troupe::engine {

// A stage's parameters (its whole flat buffer) and the layout that names them.
struct StageSnapshot {
  Rank rank;
  std::vector<model::ParamTensor> tensors;  // the stage's registry entries
  std::vector<float> params;
};

// An optimizer shard's state: Adam moments of the flat range it owns.
struct OptimSnapshot {
  Rank rank;
  model::FlatRange range;
  int64_t adam_steps = 0;
  std::vector<float> exp_avg;     // range.end - range.begin values
  std::vector<float> exp_avg_sq;
};

// Whole tensors by name: the model weights and both Adam moments.
struct NamedState {
  std::map<std::string, std::vector<float>> params, exp_avg, exp_avg_sq;
  int64_t adam_steps = 0;
};

// Assembles whole tensors from every stage and shard of a run: each stage's entries
// are boxes of global tensors (tensor-parallel slices, or whole tensors) and go to
// their place. Checks that the data-parallel replicas of a stage hold bitwise
// identical parameters, that every copy of an element (wte on the first and last
// stage, tensors replicated across tensor-parallel ranks) agrees bitwise, that every
// element of every tensor is held somewhere, that Adam step counters agree, and that
// the shards of each stage cover it exactly; throws std::runtime_error naming the
// first disagreement.
NamedState assemble_state(const Topology& t, const std::vector<StageSnapshot>& stages,
                          const std::vector<OptimSnapshot>& shards);

}  // namespace troupe::engine
