#include "actors/cluster/wire_types.h"

#include "actors/cluster/cluster_protocol.h"
#include "actors/supervision.h"

namespace troupe::wire {

void add_wire_types(caf::actor_system_config& cfg) {
  // Training messages (messages/runtime.h) and what they contain.
  cfg.add_message_type<msg::RunStep>("troupe::msg::RunStep");
  cfg.add_message_type<msg::MicrobatchReady>("troupe::msg::MicrobatchReady");
  cfg.add_message_type<msg::ActivationsReady>("troupe::msg::ActivationsReady");
  cfg.add_message_type<msg::GradientsReady>("troupe::msg::GradientsReady");
  cfg.add_message_type<msg::LossReport>("troupe::msg::LossReport");
  cfg.add_message_type<msg::ReplicaCounts>("troupe::msg::ReplicaCounts");
  cfg.add_message_type<msg::NormPartial>("troupe::msg::NormPartial");
  cfg.add_message_type<msg::UpdateCommand>("troupe::msg::UpdateCommand");
  cfg.add_message_type<msg::StageDone>("troupe::msg::StageDone");
  cfg.add_message_type<msg::Heartbeat>("troupe::msg::Heartbeat");
  cfg.add_message_type<msg::SnapshotCommand>("troupe::msg::SnapshotCommand");
  cfg.add_message_type<msg::SnapshotTaken>("troupe::msg::SnapshotTaken");
  cfg.add_message_type<msg::ShardWritten>("troupe::msg::ShardWritten");
  cfg.add_message_type<msg::MirrorKept>("troupe::msg::MirrorKept");
  cfg.add_message_type<engine::StageSnapshot>("troupe::engine::StageSnapshot");
  cfg.add_message_type<engine::OptimSnapshot>("troupe::engine::OptimSnapshot");
  // wire_atom + Registry: the coordinator wires members in every process.
  cfg.add_message_type<actors::Registry>("troupe::actors::Registry");
  // The cluster protocol (actors/cluster/cluster_protocol.h).
  cfg.add_message_type<actors::JoinRequest>("troupe::actors::JoinRequest");
  cfg.add_message_type<actors::Welcome>("troupe::actors::Welcome");
  cfg.add_message_type<actors::PlaceActor>("troupe::actors::PlaceActor");
  cfg.add_message_type<actors::AbortComms>("troupe::actors::AbortComms");
  cfg.add_message_type<actors::MirrorBuddy>("troupe::actors::MirrorBuddy");
  cfg.add_message_type<actors::MirrorCopy>("troupe::actors::MirrorCopy");
  cfg.add_message_type<actors::MirrorFetch>("troupe::actors::MirrorFetch");
  cfg.add_message_type<actors::PeerHandles>("troupe::actors::PeerHandles");
  cfg.add_message_type<actors::LeaveRun>("troupe::actors::LeaveRun");
  cfg.add_message_type<actors::FaultFired>("troupe::actors::FaultFired");
  cfg.add_message_type<actors::StoreSet>("troupe::actors::StoreSet");
  cfg.add_message_type<actors::StoreWait>("troupe::actors::StoreWait");
  cfg.add_message_type<actors::StoreAbort>("troupe::actors::StoreAbort");
  cfg.add_message_type<actors::StoreReply>("troupe::actors::StoreReply");
}

}  // namespace troupe::wire
