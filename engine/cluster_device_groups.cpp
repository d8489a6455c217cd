#include "engine/cluster_device_groups.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "comm/gloo_groups.h"
#include "kernels/gpu_backend.h"

namespace troupe::engine {
namespace {

// A copy: the backend may be replaced meanwhile (tests do).
kernels::DeviceGroups device_groups() {
  const auto backend = kernels::gpu_backend();
  if (!backend || !backend->groups.new_id || !backend->groups.join || !backend->groups.join_pipeline_pair)
    throw std::invalid_argument(
        "device.type: CUDA: cluster mode on GPUs needs NCCL (a supervisor built with CUDA, cuBLAS and NCCL)");
  return backend->groups;
}

std::string text(const std::vector<char>& v) { return {v.begin(), v.end()}; }

}  // namespace

std::string device_group_key(const std::string& prefix, const std::string& name, const std::string& direction) {
  return direction.empty() ? fmt::format("{}/nccl-id/{}", prefix, name)
                           : fmt::format("{}/nccl-id/{}/{}", prefix, name, direction);
}

std::vector<std::pair<std::string, std::string>> mint_device_group_ids(const Config& c, const std::string& prefix) {
  const auto groups = device_groups();
  const auto t = Topology::logical(c);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& g : comm::layout_groups(t.dp, t.pp, t.tp)) {
    if (g.kind == comm::GroupKind::kPipelineNeighbours) {
      out.emplace_back(device_group_key(prefix, g.name, "forward"), groups.new_id());
      out.emplace_back(device_group_key(prefix, g.name, "backward"), groups.new_id());
    } else {
      out.emplace_back(device_group_key(prefix, g.name), groups.new_id());
    }
  }
  return out;
}

RankComms join_device_groups(const Config& c, int32_t index, comm::Store& store, const std::string& prefix,
                             const std::shared_ptr<kernels::Device>& device, std::chrono::milliseconds timeout) {
  const auto groups = device_groups();
  const auto t = Topology::logical(c);
  RankComms out;
  for (const auto& g : comm::layout_groups(t.dp, t.pp, t.tp)) {
    const auto it = std::find(g.members.begin(), g.members.end(), index);
    if (it == g.members.end()) continue;
    const int member = int(it - g.members.begin());
    if (g.kind == comm::GroupKind::kPipelineNeighbours) {
      const auto forward = text(store.get(device_group_key(prefix, g.name, "forward"), timeout));
      const auto backward = text(store.get(device_group_key(prefix, g.name, "backward"), timeout));
      slot_of(out, g, member) = groups.join_pipeline_pair(forward, backward, member, device, g.name, timeout);
    } else {
      slot_of(out, g, member) = groups.join(text(store.get(device_group_key(prefix, g.name), timeout)), member,
                                            int(g.members.size()), device, g.name, timeout);
    }
  }
  return out;
}

}  // namespace troupe::engine
