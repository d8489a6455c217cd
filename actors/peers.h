// The training group's actors by role, looked up in the registry its supervisor hands
// out (on_start, wire_atom): a typed handle of the role's interface
// (actors/actor_interfaces.h), so a role that does not accept what is sent to it fails
// to compile, and a path that is not in the registry fails at the lookup, naming it
// (std::logic_error: the wiring and the topology disagree).
#pragma once

#include <stdexcept>
#include <string>

#include "actors/actor_interfaces.h"
#include "actors/supervision.h"
#include "engine/topology.h"

namespace troupe::actors {

class Peers {
 public:
  explicit Peers(const Registry& registry) : registry_(registry) {}

  stage_actor stage(const engine::Rank& r) const { return get<stage_actor>(engine::stage_path(r)); }
  optimizer_actor optimizer(const engine::Rank& r) const { return get<optimizer_actor>(engine::optim_path(r)); }
  loader_actor loader(int32_t dp) const { return get<loader_actor>(engine::loader_path(dp)); }
  coordinator_actor coordinator() const { return get<coordinator_actor>(engine::coordinator_path()); }

 private:
  template <class Interface>
  Interface get(const std::string& path) const {
    const auto it = registry_.find(path);
    if (it == registry_.end()) throw std::logic_error("the training group has no actor at " + path);
    return typed_handle<Interface>(it->second);
  }

  const Registry& registry_;
};

}  // namespace troupe::actors
