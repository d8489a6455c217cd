// The rendezvous store of a cluster run: a comm::Store held by an actor in the
// supervisor process, reached by the workers over CAF messages (StoreSet / StoreWait /
// StoreAbort, actors/cluster/cluster_protocol.h). Gloo communicators of every generation meet
// here under the prefix RUN_ID/genG, so no shared file system is needed for it.
//
// Keys are set once (a second set of a key is refused: a prefix used twice). A wait
// is answered when every key exists, or with the missing keys at its timeout. When a
// generation is abandoned (a peer died), StoreAbort fails every wait under its prefix
// at once, so no member stays in a rendezvous that can no longer complete.
#pragma once

#include <chrono>
#include <string>

#include <caf/all.hpp>

#include "comm/gloo_store.h"

namespace troupe::actors {

caf::actor spawn_store_actor(caf::actor_system& sys);

// The client side: a comm::Store whose calls are blocking requests to the store
// actor (from any thread that may block: stage threads connecting communicators).
class ActorStore final : public comm::Store {
 public:
  ActorStore(caf::actor_system& sys, caf::actor store, std::string where);

  void set(const std::string& key, std::span<const char> value) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::string describe() const override { return where_; }

 private:
  caf::actor_system& sys_;
  caf::actor store_;
  std::string where_;
};

}  // namespace troupe::actors
