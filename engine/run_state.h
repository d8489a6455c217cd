// What a run changes as it goes, kept apart from its Config (docs/layout.md, "Layout,
// placement and run state"). The Config stays what the user configured for the whole
// run; the run state starts from it and grows: a resume adds the skip list its
// checkpoint recorded, a rollback adds the spike's samples and names the checkpoint the
// next training group starts from. The runtime owns it and hands each part its piece:
// the loaders and the coordinator the skip list (the coordinator writes it into every
// manifest), the resume source the checkpoint to start from.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/topology.h"
#include "messages/checkpoint.pb.h"
#include "messages/config.pb.h"

namespace troupe::engine {

struct RollbackRequest;  // engine/rollback.h
struct RollbackDone;

struct RunState {
  // The train split's skipped sample IDs, sorted, each once: data.skip_samples, the
  // resumed checkpoint's data_position.skip_samples, each rollback's samples.
  std::vector<int64_t> skip_samples;
  // The checkpoint the training group's next first start reads: checkpoint.load's value
  // at the run's start ("" fresh, "latest", a path), the kept checkpoint after a
  // rollback ("" when none was kept). A start after a failure takes the newest one.
  std::string resume_from;
  // Training groups started before this one for a rollback (logging.on_spike ROLLBACK).
  int64_t rollbacks = 0;
  // The placement the next training group starts on: how many physical data-parallel
  // replicas compute the config's logical ones (parallel.physical_replicas at the run's
  // start; it divides parallel.data). A group start derives its wiring from it (the
  // physical workers, the communicator groups, which stage hosts which logical ranks),
  // so a later start may run on another placement and compute the same bits.
  int32_t physical_replicas = 0;

  // A run's state at its start: c.data.skip_samples (sorted, each once), checkpoint.load
  // and the configured placement.
  static RunState of(const Config& c);

  // The logical layout of `c` on this state's placement: what a training group is built from.
  Topology topology(const Config& c) const { return Topology::logical(c).placed_on(physical_replicas); }

  // Adds `ids` to the skip list (sorted, each once). Returns whether it grew.
  bool add_skips(std::span<const int64_t> ids);
  // A resume keeps skipping what the checkpoint's run skipped (docs/data.md, "Skipping
  // samples"). Returns whether the list grew.
  bool add_checkpoint_skips(const CheckpointManifest& m);
  // After a rollback: the request's samples skipped, the kept checkpoint resumed.
  void roll_back(const RollbackRequest& r, const RollbackDone& d);
};

// `ids` added to `skip` (sorted, each once; `skip` sorted, each once or not).
// Returns whether the list grew past the IDs it held.
bool merge_skip_samples(std::vector<int64_t>& skip, std::span<const int64_t> ids);

}  // namespace troupe::engine
