#include "actors/writer_actor.h"

#include <chrono>

#include <sys/resource.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "actors/message_types.h"
#include "ckpt/corrupt.h"
#include "ckpt/error.h"
#include "engine/checkpointing.h"

namespace troupe::actors {
namespace {

// The writer thread's nice value: the lowest, so a checkpoint is written with the CPU
// time compute leaves (compute threads run at 0); max_lag_steps bounds how far behind.
constexpr int kWriterNice = 19;

struct WriterState {
  WriterArgs args;
  std::string path;
};

using Self = writer_actor::stateful_base<WriterState>;

bool given_up(const msg::ShardSnapshot& s) {
  return !engine::same_directory({s.partial_dir_inode, s.partial_dir_generation}, engine::directory_identity(s.partial_dir));
}

writer_actor::behavior_type writer_impl(Self* self, WriterArgs args) {
  auto& st = self->state;
  // Below the compute threads: a checkpoint is written in the background and must not
  // preempt the step (on Linux a thread has its own nice value). Best effort.
  ::setpriority(PRIO_PROCESS, ::gettid(), kWriterNice);
  st.path = engine::writer_path(args.rank);
  st.args = std::move(args);
  exit_on_exception(self, st.path);
  return {
      [self](const msg::ShardSnapshot& s) {
        auto& w = self->state;
        const auto t0 = std::chrono::steady_clock::now();
        auto& faults = w.args.faults;
        // Faults: KILL/THROW/HANG/DELAY on receipt (phase OPTIMIZER: the copy just
        // arrived), or during the write (phase CHECKPOINT_WRITE); FAIL_WRITE fails the
        // write as a full disk would; CORRUPT_SHARD / TRUNCATE_SHARD damage the file
        // after it is written.
        auto report = [&](msg::ShardWritten done) {
          done.attempt = s.attempt;
          if (auto coordinator = typed_handle<coordinator_actor>(w.args.directory->get(engine::coordinator_path())))
            self->send(coordinator, std::move(done));
        };
        std::optional<Fault> damage;
        bool fail_write = false;
        if (faults && faults->targets(w.path)) {
          // HANG blocks this thread as a stuck write would (the save's deadline finds it
          // and has the writer replaced); DELAY slows it and it goes on.
          engine::check_fault(faults.get(), w.path, s.step, Fault::OPTIMIZER);
          const auto writer_kind = [](const Fault& f) {
            return f.kind() == Fault::CORRUPT_SHARD || f.kind() == Fault::TRUNCATE_SHARD ||
                   f.kind() == Fault::FAIL_WRITE;
          };
          if (auto f = faults->take(w.path, s.step, Fault::CHECKPOINT_WRITE, writer_kind)) {
            fail_write = f->kind() == Fault::FAIL_WRITE;
            if (!fail_write) damage = f;
          }
          engine::check_fault(faults.get(), w.path, s.step, Fault::CHECKPOINT_WRITE);
        }
        // A snapshot of a save the coordinator gave up meanwhile (its directory is gone,
        // or was made anew for a later save of the same step): nothing waits for it.
        if (given_up(s)) {
          spdlog::info("{}: checkpoint of step {} was given up before this shard was written; shard dropped", w.path,
                       s.step);
          return;
        }
        const auto values = [n = size_t(s.range_end - s.range_begin)](const std::shared_ptr<const float>& p) {
          return std::vector<float>(p.get(), p.get() + n);
        };
        auto state = std::make_shared<const engine::ShardState>(engine::ShardState{
            s.rank, {s.range_begin, s.range_end}, values(s.params), values(s.exp_avg), values(s.exp_avg_sq)});
        const auto file = engine::shard_file_name(state->rank);
        try {
          if (fail_write) throw ckpt::CheckpointError("injected FAIL_WRITE");
          const auto record = engine::write_shard(*w.args.layout, *state, s.partial_dir, file, w.path);
          if (w.args.copies) w.args.copies->keep(file, {s.step, w.path, state, record, w.args.layout});
          if (damage) {
            const auto target = s.partial_dir + "/" + file;
            if (damage->kind() == Fault::CORRUPT_SHARD)
              ckpt::flip_bytes(target, record.size_bytes() / 2);
            else
              ckpt::truncate_file(target, record.size_bytes() / 2);
            spdlog::warn("{}: injected {} of {} at step {}", w.path, Fault::Kind_Name(damage->kind()), target,
                         s.step);
          }
          report({s.step, s.rank, true, {}, record.SerializeAsString(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                  int64_t(record.size_bytes())});
        } catch (const ckpt::CheckpointError& e) {
          // The coordinator gave this checkpoint up meanwhile (another writer failed)
          // and removed its directory: nothing of it can be written or is waited for.
          if (given_up(s)) {
            spdlog::info("{}: checkpoint of step {} was given up while this shard was written; shard dropped",
                         w.path, s.step);
            return;
          }
          // The write failed (a full disk, a file system gone read-only): the checkpoint
          // fails and the coordinator says so once. The fault is the storage's, not this
          // writer's: it stays up for the next save. The coordinator removes the save's
          // partial directory, with what this writer left in it.
          report({s.step, s.rank, false, e.what(), {}, 0, 0});
        }
      },
  };
}

}  // namespace

writer_actor spawn_writer(caf::event_based_actor* parent, WriterArgs args) {
  return parent->spawn<caf::detached>(writer_impl, std::move(args));
}

}  // namespace troupe::actors
