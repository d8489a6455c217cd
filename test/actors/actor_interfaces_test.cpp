// The training actors' typed interfaces (actors/actor_interfaces.h), checked at
// compile time the way CAF 0.17's send, anon_send and request check a message: what
// each actor accepts, and messages meant for another actor that it refuses (sending
// one of those does not compile). The file compiles into test_supervision; the one
// case that runs checks Peers (actors/peers.h), the lookup of the group's actors by role.
#include <doctest/doctest.h>

#include <type_traits>

#include "actors/actor_interfaces.h"
#include "actors/peers.h"
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

// Peers: the group's actors by role, typed; a role the registry lacks fails at the
// lookup, naming its path.
TEST_CASE("Peers hands out typed handles by role and names the path a lookup misses") {
  using namespace troupe;
  using namespace troupe::actors;
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  const caf::actor echo = sys.spawn([]() -> caf::behavior { return {[](int x) { return x; }}; });
  const Registry registry{{"coordinator", echo}, {"stage/dp1/pp0/tp0", echo}, {"loader/dp1", echo}};
  const Peers peers(registry);
  static_assert(std::is_same_v<decltype(peers.stage({})), stage_actor>);
  static_assert(std::is_same_v<decltype(peers.coordinator()), coordinator_actor>);
  CHECK(peers.coordinator().address() == echo.address());
  CHECK(peers.stage({1, 0, 0}).address() == echo.address());
  CHECK(peers.loader(1).address() == echo.address());
  CHECK_THROWS_WITH_AS(peers.stage({0, 1, 0}), "the training group has no actor at stage/dp0/pp1/tp0", std::logic_error);
  CHECK_THROWS_WITH_AS(peers.optimizer({1, 0, 0}), "the training group has no actor at optim/dp1/pp0/tp0",
                       std::logic_error);
  caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
}
