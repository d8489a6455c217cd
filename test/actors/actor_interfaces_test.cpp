// The training actors' typed interfaces (actors/actor_interfaces.h), checked at
// compile time the way CAF 0.17's send, anon_send and request check a message: what
// each actor accepts, and messages meant for another actor that it refuses (sending
// one of those does not compile). Nothing here runs; the file compiles into
// test_supervision.
#include "actors/actor_interfaces.h"
#include "metrics/step_record.h"

namespace {

using namespace troupe;
using namespace troupe::actors;

// Whether an actor of `Interface` accepts a message of `Ts...`: the condition of
// CAF's "receiver does not accept given message".
template <class Interface, class... Ts>
constexpr bool accepts =
    caf::response_type_unbox<caf::signatures_of_t<Interface>, caf::detail::type_list<Ts...>>::valid;

// metrics: woken by drain_atom; records go through the MetricsInbox, never as messages.
static_assert(accepts<metrics_actor, drain_atom>);
static_assert(accepts<metrics_actor, ping_atom>);
static_assert(!accepts<metrics_actor, metrics::StepRecord>);
static_assert(!accepts<metrics_actor, event_atom, std::string, int64_t, double, std::string>);

// writer: only its shard's copy; the command to take it is the optimizer shard's.
static_assert(accepts<writer_actor, msg::ShardSnapshot>);
static_assert(!accepts<writer_actor, msg::SnapshotCommand>);
static_assert(!accepts<writer_actor, ping_atom>);  // not watched for hangs

// loader: credits and its stream's start; the microbatches it sends are the stages'.
static_assert(accepts<loader_actor, credit_atom, int64_t, int32_t>);
static_assert(accepts<loader_actor, start_atom, int64_t, int64_t, int64_t>);
static_assert(!accepts<loader_actor, msg::MicrobatchReady>);
static_assert(!accepts<loader_actor, credit_atom, int64_t, int64_t>);  // the microbatch is int32_t
static_assert(!accepts<loader_actor, ping_atom>);

// stage: the step's inputs; the loader's credit is not for it.
static_assert(accepts<stage_actor, eval_consumed_atom, int64_t, int32_t, int32_t>);
static_assert(accepts<stage_actor, msg::MicrobatchReady>);
static_assert(accepts<stage_actor, msg::ShardApplied>);
static_assert(!accepts<stage_actor, credit_atom, int64_t, int32_t>);
static_assert(!accepts<stage_actor, msg::UpdateCommand>);
static_assert(!accepts<stage_actor, msg::GradShardReady>);

// optimizer shard: its stage's gradients and the coordinator's commands.
static_assert(accepts<optimizer_actor, msg::GradShardReady>);
static_assert(accepts<optimizer_actor, msg::UpdateCommand>);
static_assert(accepts<optimizer_actor, msg::SnapshotCommand>);
static_assert(!accepts<optimizer_actor, msg::ShardApplied>);  // it sends that to its stage
static_assert(!accepts<optimizer_actor, msg::ShardSnapshot>);  // only with deliver_atom, from itself
static_assert(!accepts<optimizer_actor, msg::NormPartial>);

// coordinator: reports in; what it sends out (commands, snapshots) it does not accept.
static_assert(accepts<coordinator_actor, msg::ShardWritten>);
static_assert(accepts<coordinator_actor, msg::SnapshotTaken>);
static_assert(accepts<coordinator_actor, writer_down_atom, std::string>);
static_assert(!accepts<coordinator_actor, msg::ShardSnapshot>);
static_assert(!accepts<coordinator_actor, msg::UpdateCommand>);
static_assert(!accepts<coordinator_actor, msg::RunStep>);

// the run's client: only the end.
static_assert(accepts<run_client, finished_atom, RunOutcome>);
static_assert(!accepts<run_client, msg::StageDone>);

}  // namespace
