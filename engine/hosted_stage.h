// What the logical ranks one physical rank hosts share (parallel.physical_replicas <
// parallel.data; docs/layout.md): one model stage (weights, gradient buffer, activation
// slots) on one device, the accumulator of the shards it owns in the ordered
// reduction (comm/ordered_reduction.h), and a lock its optimizer shards hold across
// each of their device calls (the hosted stages take turns by message; their shards
// would otherwise call the device from several threads at once).
#pragma once

#include <functional>
#include <memory>
#include <mutex>

#include "engine/topology.h"
#include "kernels/device.h"
#include "messages/config.pb.h"
#include "model/gpt_stage.h"

namespace troupe::engine {

struct HostedStage {
  std::mutex mu;
  // Made by the first hosted rank to start (shared_model): the device before the model,
  // whose buffers it releases.
  std::shared_ptr<kernels::Device> device;
  std::shared_ptr<model::GptStage> model;
  kernels::Buffer accumulator;
  // Held by a hosted optimizer shard across each call that computes on the device.
  std::mutex device_turn;
};

// The shared stage of `comms` (comms.hosted), made on first use by `make` on `device`,
// with its accumulator allocated there (counted as gradients) and handed to the ordered
// reduction. `made` says whether this call made it (that rank loads its weights).
std::shared_ptr<model::GptStage> shared_model(const RankComms& comms,
                                              const std::shared_ptr<kernels::Device>& device,
                                              const std::function<std::unique_ptr<model::GptStage>()>& make,
                                              bool& made);

// Makes `host` (the RankComms of host rank r, its groups those of the physical
// layout) a hosting one: its HostedStage and its member of the ordered reduction over
// its data-parallel group of the physical replicas.
void add_hosting(RankComms& host, const Config& c, const Rank& r, std::chrono::milliseconds timeout);

// In-process communicators of a layout whose physical replicas host several logical
// ones: the groups of the physical layout, and each host rank made hosting; indexed by
// the logical Topology::index (ranks of later rounds are left empty: they take their
// host's).
// `placed`: the logical layout on its placement.
CommPlan make_hosting_comms(const Config& c, const Topology& placed, std::chrono::milliseconds timeout);

}  // namespace troupe::engine
