#include "actors/mirror_keeper.h"

#include <map>

#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/message_types.h"
#include "engine/checkpointing.h"

namespace troupe::actors {
namespace {

// How long a buddy may take to acknowledge a copy: past it the shard counts as held by
// this worker alone (a lost buddy is found by the link watch meanwhile).
constexpr auto kBuddyTimeout = std::chrono::seconds(30);

struct KeeperState {
  MirrorKeeperArgs args;
  std::map<std::string, std::shared_ptr<const ckpt::FlatLayout>> layouts;  // by shard file: cut once per rank
  MirrorBuddy buddy;                                                      // cluster mode; worker_id 0: none
  bool buddy_failure_said = false;
};

using Self = mirror_keeper_actor::stateful_base<KeeperState>;

void report(Self* self, const msg::MirrorSnapshot& s, const ShardFile& record, std::vector<int32_t> holders) {
  auto& st = self->state;
  if (auto coordinator = typed_handle<coordinator_actor>(st.args.directory->get(engine::coordinator_path())))
    self->send(coordinator, msg::MirrorKept{s.step, s.timeline, s.rank, record.SerializeAsString(), std::move(holders)});
}

// The keeper thread's nice value: below the compute threads (0), above the writers (19).
// A keeper short of CPU makes the mirror older, never wrong.
constexpr int kKeeperNice = 10;

mirror_keeper_actor::behavior_type keeper_impl(Self* self, MirrorKeeperArgs args) {
  ::setpriority(PRIO_PROCESS, ::gettid(), kKeeperNice);  // best effort
  self->state.args = std::move(args);
  exit_on_exception(self, engine::mirror_keeper_path());
  return {
      [self](const msg::MirrorSnapshot& s) {
        auto& st = self->state;
        const auto file = engine::shard_file_name(s.rank);
        auto& layout = st.layouts[file];
        if (!layout) layout = std::make_shared<const ckpt::FlatLayout>(st.args.layout_of(s.rank));
        auto shard = engine::serialize_shard(*layout, {s.range_begin, s.range_end}, s.params.get(), s.exp_avg.get(),
                                             s.exp_avg_sq.get(), file, engine::writer_path(s.rank),
                                             st.args.store->buffer(file));
        if (!st.args.store->keep(s.timeline, s.step, file, shard.bytes)) return;  // a timeline left behind
        const int32_t me = st.args.worker_id;
        if (me == 0) return report(self, s, shard.record, {});  // one process: the store is the supervisor's
        if (st.buddy.worker_id == 0) return report(self, s, shard.record, {me});
        // Held by the buddy too once it says so; the coordinator files the step then.
        const int32_t buddy = st.buddy.worker_id;
        self->request(st.buddy.host, kBuddyTimeout, MirrorCopy{s.step, s.timeline, file, *shard.bytes})
            .then([self, s, record = shard.record, me, buddy](mirror_held_atom) { report(self, s, record, {me, buddy}); },
                  [self, s, record = shard.record, me, buddy](caf::error& e) {
                    auto& k = self->state;
                    if (!std::exchange(k.buddy_failure_said, true))
                      spdlog::warn("worker {}: the state mirror's buddy, worker {}, did not take a copy ({}); its "
                                   "shards are held here alone until it does",
                                   me, buddy, self->system().render(e));
                    report(self, s, record, {me});
                  });
      },
      [self](const MirrorBuddy& b) {
        self->state.buddy = b;
        self->state.buddy_failure_said = false;
      },
      [self](MirrorCopy& c) -> mirror_held_atom {
        self->state.args.store->keep(c.timeline, c.step, c.file, std::make_shared<const std::string>(std::move(c.bytes)));
        return mirror_held_atom::value;
      },
      [self](const MirrorFetch& f) -> caf::result<std::string> {
        if (auto bytes = self->state.args.store->find(f.step, f.file)) return *bytes;
        return caf::make_error(caf::sec::runtime_error,
                               fmt::format("worker {} holds no copy of {} of step {}", self->state.args.worker_id,
                                           f.file, f.step));
      },
  };
}

}  // namespace

mirror_keeper_actor spawn_mirror_keeper(caf::event_based_actor* parent, MirrorKeeperArgs args) {
  return parent->spawn<caf::detached>(keeper_impl, std::move(args));
}

ChildSpec mirror_keeper_child(std::shared_ptr<const Config> config, std::shared_ptr<engine::MirrorStore> store,
                              std::shared_ptr<Directory> directory) {
  MirrorKeeperArgs args{[config](const engine::Rank& r) { return engine::shard_layout(*config, r); }, std::move(store),
                        std::move(directory)};
  return {engine::mirror_keeper_path(), Restart::Permanent, [args](caf::event_based_actor* self, int) {
            return untyped_handle(spawn_mirror_keeper(self, args));
          }};
}

}  // namespace troupe::actors
