#include "actors/mirror_keeper.h"

#include <map>

#include "actors/message_types.h"
#include "engine/checkpointing.h"

namespace troupe::actors {
namespace {

struct KeeperState {
  MirrorKeeperArgs args;
  std::map<std::string, std::shared_ptr<const ckpt::FlatLayout>> layouts;  // by shard file: cut once per rank
};

using Self = mirror_keeper_actor::stateful_base<KeeperState>;

mirror_keeper_actor::behavior_type keeper_impl(Self* self, MirrorKeeperArgs args) {
  self->state.args = std::move(args);
  exit_on_exception(self, engine::mirror_keeper_path());
  return {
      [self](const msg::MirrorSnapshot& s) {
        auto& st = self->state;
        const auto file = engine::shard_file_name(s.rank);
        auto& layout = st.layouts[file];
        if (!layout) layout = std::make_shared<const ckpt::FlatLayout>(st.args.layout_of(s.rank));
        const auto n = size_t(s.range_end - s.range_begin);
        const auto values = [n](const std::shared_ptr<const float>& p) { return std::vector<float>(p.get(), p.get() + n); };
        const engine::ShardState state{s.rank, {s.range_begin, s.range_end}, values(s.params), values(s.exp_avg),
                                       values(s.exp_avg_sq)};
        auto shard = engine::serialize_shard(*layout, state, file, engine::writer_path(s.rank));
        if (!st.args.store->keep(s.timeline, s.step, file, std::move(shard.bytes))) return;  // a timeline left behind
        if (auto coordinator = typed_handle<coordinator_actor>(st.args.directory->get(engine::coordinator_path())))
          self->send(coordinator, msg::MirrorKept{s.step, s.timeline, s.rank, shard.record.SerializeAsString()});
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
