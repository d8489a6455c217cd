// Cluster mode on GPUs: every communicator group of the layout is an NCCL group whose
// members live in the worker processes (kernels::DeviceGroups, installed by a binary
// linked with NCCL).
//
// Each start of the training group opens a generation (store prefix RUN_ID/genG,
// actors/cluster/cluster.h). For it the supervisor mints one unique ID per group and puts it in
// the run's rendezvous store (mint_device_group_ids): the groups and names of
// comm/gloo_groups.h, the pipeline pairs with two IDs (a communicator per direction).
// Each worker's rank then joins its groups with those IDs on its own device, in the
// layout's one group order (join_device_groups), so no two ranks wait for each other
// in opposite orders. A later generation gets fresh IDs: the groups of a failed one are
// aborted and never reused.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/gloo_store.h"
#include "engine/topology.h"
#include "kernels/device.h"
#include "messages/config.pb.h"

namespace troupe::engine {

// The store key of group `name`'s ID in a generation; `direction` is "" for a group,
// "forward" or "backward" for a pipeline pair's two communicators.
std::string device_group_key(const std::string& prefix, const std::string& name, const std::string& direction = "");

// (key, ID) for every group of c's layout in one generation. Needs the installed GPU
// backend's DeviceGroups::new_id (std::invalid_argument naming device.type otherwise).
std::vector<std::pair<std::string, std::string>> mint_device_group_ids(const Config& c, const std::string& prefix);

// Rank `index` (Topology::index) joins its groups on `device` with the IDs under
// `prefix`, each wait (for the ID, then for the members) up to `timeout`. Throws
// comm::CommError naming the group when one cannot be joined.
RankComms join_device_groups(const Config& c, int32_t index, comm::Store& store, const std::string& prefix,
                             const std::shared_ptr<kernels::Device>& device, std::chrono::milliseconds timeout);

}  // namespace troupe::engine
