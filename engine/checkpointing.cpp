#include "engine/checkpointing.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ckpt/commit.h"
#include "ckpt/error.h"
#include "ckpt/flat_layout.h"
#include "ckpt/manifest.h"
#include "ckpt/shard_writer.h"
#include "config/error.h"
#include "engine/shard_copies.h"
#include "engine/state_mirror.h"
#include "engine/stage_worker.h"
#include "util/durable_file.h"

namespace troupe::engine {

std::string checkpoint_root(const Config& c) {
  if (!c.checkpoint().dir().empty()) return c.checkpoint().dir();
  return (std::filesystem::path(c.logging().run_dir()) / "checkpoints").string();
}

std::string unused_name_beside(const std::string& path, const std::string& suffix) {
  std::string name = path + suffix;
  for (int n = 1; std::filesystem::exists(name); ++n) name = fmt::format("{}{}-{}", path, suffix, n);
  return name;
}

namespace {

// What the commit protocol leaves in a root (ckpt/commit.h): `latest`, its temporary, and
// step_N directories, complete, .partial or .deleting. Anything else is not troupe's.
bool is_checkpoint_entry(const std::string& name) {
  return name == "latest" || name == "latest.tmp" || ckpt::parse_step_dir_name(name.substr(0, name.find('.')));
}

std::vector<std::filesystem::path> checkpoint_entries(const std::filesystem::path& root) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec))
    if (is_checkpoint_entry(e.path().filename().string())) out.push_back(e.path());
  if (ec) throw ckpt::CheckpointError(root.string() + ": cannot list: " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string set_aside_earlier_checkpoints(const Config& c) {
  if (!c.checkpoint().load().empty()) return "";
  const std::filesystem::path root = checkpoint_root(c);
  std::error_code ec;
  if (!std::filesystem::is_directory(root, ec)) return "";
  const auto entries = checkpoint_entries(root);
  if (entries.empty()) return "";  // nothing of an earlier run (other files are not troupe's to move)
  const auto stamp = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
  std::filesystem::path aside = unused_name_beside(root.string(), fmt::format(".previous-{}", stamp));
  std::filesystem::rename(root, aside, ec);
  const bool moved_whole = !ec;
  if (!moved_whole) {
    // A root that cannot be renamed (a mount point of its own: EBUSY; or its parent is
    // not writable): the earlier run's entries move into ROOT/previous-<time>/ instead,
    // which the commit protocol never lists or prunes.
    aside = unused_name_beside((root / "previous").string(), fmt::format("-{}", stamp));
    std::filesystem::create_directory(aside, ec);
    if (ec)
      throw ckpt::CheckpointError(fmt::format("{}: holds an earlier run's checkpoints, and neither the root nor they "
                                              "could be set aside ({}: {})",
                                              root.string(), aside.string(), ec.message()));
    for (const auto& e : entries) {
      std::filesystem::rename(e, aside / e.filename(), ec);
      if (ec)
        throw ckpt::CheckpointError(fmt::format("{}: cannot set the earlier run's {} aside into {}: {}", root.string(),
                                                e.filename().string(), aside.string(), ec.message()));
    }
  }
  // The renames made durable before the fresh run writes its first checkpoint: a crash
  // must not bring the earlier run's `latest` back under the root. Moved whole: the
  // root's folder holds both names; moved entry by entry: both folders changed.
  util::rethrow_file_error_as<ckpt::CheckpointError>([&] {
    if (moved_whole) {
      util::fsync_parent_dir(aside.string());
    } else {
      util::fsync_dir(aside.string());
      util::fsync_dir(root.string());
    }
  });
  spdlog::warn("checkpoint: a fresh start (checkpoint.load is empty); the earlier checkpoints in {} were moved to {}",
               root.string(), aside.string());
  return aside.string();
}

ResumeSource::ResumeSource(const Config& c, std::string load) : root_(checkpoint_root(c)), load_(std::move(load)) {}

void ResumeSource::heal_from(std::shared_ptr<const ShardCopies> copies) {
  std::lock_guard lock(mu_);
  copies_ = std::move(copies);
}

void ResumeSource::mirror_from(std::shared_ptr<const MirrorBook> mirror, std::function<bool(int32_t)> alive) {
  std::lock_guard lock(mu_);
  mirror_ = std::move(mirror);
  alive_ = std::move(alive);
}

std::shared_ptr<const ResumeSource::MirrorStart> ResumeSource::mirror_start() const {
  std::lock_guard lock(mu_);
  return mirror_start_;
}

bool ResumeSource::resume_from_mirror() {
  const auto newest = mirror_->newest();
  if (!newest) return false;
  std::optional<int64_t> on_disk;
  try {
    if (std::filesystem::exists(root_)) on_disk = ckpt::read_latest(root_);
  } catch (const ckpt::CheckpointError&) {
    // An unreadable `latest`: the mirror is newer than anything it could name.
  }
  if (on_disk && *on_disk > newest->step()) return false;
  if (alive_) {
    // Cluster mode: every shard needs a live holder; the workers fetch the bytes.
    auto start = std::make_shared<MirrorStart>();
    start->step = newest->step();
    start->manifest = *newest;
    const auto holders = mirror_->holders();
    for (const auto& shard : newest->shard()) {
      const auto it = holders.find(shard.file());
      std::optional<int32_t> live;
      if (it != holders.end())
        for (const int32_t w : it->second.workers)
          if (!live && alive_(w)) live = w;
      if (!live) {
        report_.push_back(fmt::format("{}: no live worker holds {} any more; reading the newest checkpoint on disk "
                                      "instead",
                                      mirror_label(newest->step()), shard.file()));
        return false;
      }
      start->sources.emplace_back(it->second.rank, *live);
    }
    // The supervisor reads only the position: a checkpoint of the manifest alone.
    ckpt_ = std::make_shared<const ckpt::Checkpoint>(ckpt::Checkpoint::from_memory(
        mirror_label(newest->step()), *newest, {}, ckpt::Checkpoint::Verify::kReport));
    mirror_start_ = std::move(start);
    return true;
  }
  try {
    ckpt_ = mirror_->open_newest();
  } catch (const ckpt::CheckpointError& e) {
    // The error names the mirror ("memory: the state mirror of step N: damaged ...").
    report_.push_back(fmt::format("{}; reading the newest checkpoint on disk instead", e.what()));
    return false;
  }
  return true;
}

void ResumeSource::heal_latest() {
  std::optional<int64_t> step;
  try {
    step = ckpt::read_latest(root_);
  } catch (const ckpt::CheckpointError&) {
    return;  // load_latest reports it
  }
  if (!step) return;
  const std::string dir = root_ + "/" + ckpt::step_dir_name(*step);
  std::optional<ckpt::Checkpoint> ck;
  try {
    ck.emplace(ckpt::Checkpoint::open(dir, ckpt::Checkpoint::Verify::kReport));
  } catch (const ckpt::CheckpointError&) {
    return;  // a damaged manifest: nothing in memory rewrites it; load_latest reports it
  }
  if (!ck->damaged()) return;
  for (const auto& check : ck->shard_checks()) {
    if (check.ok()) continue;
    const auto copy = copies_->find(*step, check.file);
    const std::string where = dir + "/" + check.file;
    if (!copy) {
      report_.push_back(fmt::format("{}: damaged ({}), and no copy of it is held in memory", where, check.problem));
      continue;
    }
    const ShardFile* listed = nullptr;
    for (const auto& s : ck->manifest().shard())
      if (s.file() == check.file) listed = &s;
    if (!listed || copy->record.size_bytes() != listed->size_bytes() || copy->record.crc32c() != listed->crc32c()) {
      report_.push_back(fmt::format("{}: damaged ({}); the copy held in memory is not the one the manifest lists",
                                    where, check.problem));
      continue;
    }
    try {
      const ShardFile rewritten = write_shard(*copy->layout, *copy->state, dir, check.file, copy->writer);
      if (rewritten.size_bytes() != listed->size_bytes() || rewritten.crc32c() != listed->crc32c())
        throw ckpt::CheckpointError(fmt::format("the rewrite has {} bytes, CRC-32C {:#010x}; the manifest says {} "
                                                "bytes, {:#010x}",
                                                rewritten.size_bytes(), rewritten.crc32c(), listed->size_bytes(),
                                                listed->crc32c()));
      report_.push_back(fmt::format("{}: was damaged on disk ({}); rewritten from the copy this process's writer "
                                    "kept in memory (size and CRC-32C as the manifest lists)",
                                    where, check.problem));
    } catch (const ckpt::CheckpointError& e) {
      report_.push_back(fmt::format("{}: damaged ({}); rewriting it from memory failed: {}", where, check.problem,
                                    e.what()));
    }
  }
}

std::shared_ptr<const ckpt::Checkpoint> ResumeSource::current() {
  std::lock_guard lock(mu_);
  if (!stale_) return ckpt_;
  stale_ = false;
  ckpt_.reset();
  mirror_start_.reset();
  report_.clear();
  if (!failed_before_ && load_.empty()) return ckpt_;  // a fresh start
  if (!failed_before_ && load_ != "latest") {
    ckpt_ = std::make_shared<const ckpt::Checkpoint>(ckpt::open_checkpoint_path(load_, &report_));
  } else if (failed_before_ && mirror_ && resume_from_mirror()) {
    spdlog::info("checkpoint: resuming from the state mirror of step {} {} ({} shards{}; no checkpoint read)",
                 ckpt_->step(), mirror_start_ ? "held by the workers" : "in memory", ckpt_->manifest().shard_size(),
                 mirror_start_ ? "" : " verified");
    return ckpt_;
  } else if (std::filesystem::exists(root_)) {
    if (copies_) heal_latest();
    auto outcome = ckpt::load_latest(root_);
    report_.insert(report_.end(), outcome.report.begin(), outcome.report.end());
    if (outcome.checkpoint) {
      ckpt_ = std::make_shared<const ckpt::Checkpoint>(std::move(*outcome.checkpoint));
    } else if (outcome.damage_found) {
      // Checkpoints exist but none loads: starting from scratch would train over (and
      // prune) the evidence. A fresh start is for a run that has none yet, or load "".
      std::string msg = root_ + ": no checkpoint loads, and starting fresh would prune the damaged ones:";
      for (const auto& line : report_) msg += "\n  " + line;
      throw ckpt::CheckpointError(msg + "\n(fix or move them aside, or start fresh with checkpoint.load \"\")");
    }
  }
  for (const auto& line : report_) spdlog::warn("checkpoint: {}", line);
  if (ckpt_) spdlog::info("checkpoint: resuming from {} (step {})", ckpt_->dir(), ckpt_->step());
  return ckpt_;
}

void ResumeSource::invalidate() {
  std::lock_guard lock(mu_);
  stale_ = true;
  failed_before_ = true;
}

std::vector<std::string> ResumeSource::report() const {
  std::lock_guard lock(mu_);
  return report_;
}

ckpt::FlatLayout reading_layout(const ckpt::Checkpoint& ck, const model::ParameterRegistry& reg) {
  ckpt::FlatLayout out;
  const auto stored = ck.tensors();
  for (auto l : ckpt::flat_layout(reg)) {
    const auto& t = *std::find_if(reg.tensors().begin(), reg.tensors().end(),
                                  [&](const model::ParamTensor& e) { return e.offset == l.offset; });
    if (t.valid_rows < t.global_shape[0]) {  // a padded tensor: read its real rows only
      const int64_t begin = l.box[0].offset, end = std::min(begin + l.box[0].extent, t.valid_rows);
      if (end <= begin) continue;  // this slice is all padding
      l.box[0].extent = end - begin;
      for (const auto& info : stored)
        if (info.name == t.name && info.kind == TensorPiece::PARAM && info.shape.size() == l.global_shape.size() &&
            info.shape[0] >= t.valid_rows &&
            std::equal(info.shape.begin() + 1, info.shape.end(), l.global_shape.begin() + 1))
          l.global_shape = info.shape;
    }
    out.push_back(std::move(l));
  }
  return out;
}

void restore_stage(const ckpt::Checkpoint& ck, model::GptStage& stage) {
  const auto layout = reading_layout(ck, stage.registry());
  std::vector<float> host(size_t(stage.param_count()));
  ckpt::read_flat_range(ck, layout, TensorPiece::PARAM, 0, stage.param_count(), host.data());
  stage.device().copy_from_host(stage.params(), host.data(), host.size() * sizeof(float));
}

void init_stage_from_hf(const ckpt::HfModel& hf, model::GptStage& stage) {
  std::vector<float> host(size_t(stage.param_count()));
  hf.read_into(stage.registry(), host.data());
  stage.device().copy_from_host(stage.params(), host.data(), host.size() * sizeof(float));
}

ckpt::HfModel open_init_from(const std::string& dir, const ModelConfig& model) {
  try {
    return ckpt::HfModel::open(dir, model);
  } catch (const ckpt::CheckpointError& e) {
    throw ckpt::CheckpointError(std::string("training.init_from: ") + e.what());
  }
}

ckpt::HfModel open_init_from(const Config& c) { return open_init_from(c.training().init_from(), c.model()); }

void restore_shard(const ckpt::Checkpoint& ck, const model::ParameterRegistry& reg, OptimizerShard& shard) {
  const auto layout = reading_layout(ck, reg);
  const auto r = shard.range();
  auto& a = shard.adamw();
  auto& device = shard.device();
  // Through the host: the moments may live in GPU memory. Gaps between tensors keep
  // their values (read_flat_range leaves them untouched).
  std::vector<float> host(size_t(r.end - r.begin));
  const size_t bytes = host.size() * sizeof(float);
  for (auto [piece, moment] : {std::pair{TensorPiece::EXP_AVG, a.m()}, std::pair{TensorPiece::EXP_AVG_SQ, a.v()}}) {
    device.copy_to_host(host.data(), moment, bytes);
    ckpt::read_flat_range(ck, layout, piece, r.begin, r.end, host.data());
    device.copy_from_host(moment, host.data(), bytes);
  }
  a.set_steps(ck.manifest().successful_updates());
}

bool writes_shard(bool distributed_optimizer, const Rank& r) { return distributed_optimizer || r.dp == 0; }
bool writes_shard(const Config& c, const Rank& r) { return writes_shard(c.parallel().distributed_optimizer(), r); }

std::string shard_file_name(const Rank& r) { return fmt::format("dp{}_pp{}_tp{}.shard", r.dp, r.pp, r.tp); }

DirectoryIdentity directory_identity(const std::string& path) {
  // The inode by stat(2), which needs no descriptor: a process out of descriptors must
  // not take its save's directory for gone (its writers would drop their shards unseen
  // and the save wait for them); their writes then fail, naming what ran out.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return {};
  DirectoryIdentity id;
  // No device number: workers may mount a shared checkpoint directory under another.
  id.inode = uint64_t(st.st_ino);
  // The generation needs a descriptor; without one it stays 0 (not known).
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return id;
  long generation = 0;  // the ioctl writes a long (the kernel's int-sized value, widened)
  if (::ioctl(fd, FS_IOC_GETVERSION, &generation) == 0) id.generation = uint64_t(uint32_t(generation));
  ::close(fd);
  return id;
}

bool same_directory(const DirectoryIdentity& then, const DirectoryIdentity& now) {
  if (then.inode == 0 || then.inode != now.inode) return false;
  // Without generations a reused inode goes unseen: the late writer then writes the
  // bytes the new attempt's writer writes (a replayed step is bitwise the original),
  // through its own temporary name, and the coordinator ignores its report (attempt).
  return then.generation == 0 || now.generation == 0 || then.generation == now.generation;
}

ckpt::FlatLayout shard_layout(const Config& c, const Rank& r) { return ckpt::flat_layout(stage_registry(c, r)); }

void add_shard_pieces(ckpt::ShardWriter& w, const ckpt::FlatLayout& layout, const model::FlatRange& range,
                      const float* params, const float* exp_avg, const float* exp_avg_sq) {
  // The buffers hold the range only: shift so that buffer[range.begin] is element 0.
  const auto put = [&](ckpt::TensorKind kind, const float* values) {
    for (const auto& p : ckpt::flat_range_pieces(layout, kind, range.begin, range.end))
      w.add(p.spec, std::span<const float>(values + (p.buffer_offset - range.begin), size_t(p.spec.region.elements())));
  };
  put(TensorPiece::PARAM, params);
  put(TensorPiece::EXP_AVG, exp_avg);
  put(TensorPiece::EXP_AVG_SQ, exp_avg_sq);
}

void add_shard_pieces(ckpt::ShardWriter& w, const ckpt::FlatLayout& layout, const ShardState& s) {
  add_shard_pieces(w, layout, s.range, s.params.data(), s.exp_avg.data(), s.exp_avg_sq.data());
}

ShardFile write_shard(const ckpt::FlatLayout& layout, const ShardState& s, const std::string& dir,
                      const std::string& file, const std::string& writer) {
  ckpt::ShardWriter w(dir, file, writer);
  add_shard_pieces(w, layout, s);
  return w.finish();
}

CheckpointManifest make_manifest(const Config& c, const Topology& placed, std::span<const int64_t> skip_samples,
                                 const TrainingPosition& pos, std::vector<ShardFile> shards) {
  CheckpointManifest m;
  ckpt::set_manifest_config(m, c);
  auto* t = m.mutable_topology();
  t->set_data(placed.dp);
  t->set_pipeline(placed.pp);
  t->set_tensor(placed.tp);
  t->set_physical_replicas(placed.physical_replicas());
  m.set_step(pos.step);
  m.set_consumed_samples(pos.consumed_samples);
  m.set_successful_updates(pos.successful_updates);
  m.set_skipped_updates(pos.skipped_updates);
  // The LR schedule's position: samples of successful updates (sched/lr_schedule.h).
  m.set_lr_schedule_samples(pos.successful_updates * c.batch().global_batch_size());
  // Training is dropout-free: the only randomness is the seed, which fixes the
  // initial weights and the data order (a pure function of consumed samples).
  auto* rng = m.add_rng();
  rng->set_name("training.seed");
  const uint64_t seed = c.training().seed();
  rng->set_state(std::string(reinterpret_cast<const char*>(&seed), sizeof(seed)));
  m.mutable_data_position()->set_consumed_samples(pos.consumed_samples);
  m.mutable_data_position()->set_epoch(pos.epoch);
  for (const int64_t id : skip_samples) m.mutable_data_position()->add_skip_samples(id);
  for (const auto& d : pos.datasets) {
    auto* x = m.mutable_data_position()->add_datasets();
    x->set_prefix(d.prefix);
    x->set_consumed_samples(d.samples);
    x->set_consumed_tokens(d.tokens);
  }
  for (auto& s : shards) *m.add_shard() = std::move(s);
  return m;
}

TrainingPosition position_of(const CheckpointManifest& m) {
  TrainingPosition p{m.step(), m.consumed_samples(), m.successful_updates(), m.skipped_updates(),
                     m.data_position().epoch(), {}};
  for (const auto& d : m.data_position().datasets())
    p.datasets.push_back({d.prefix(), d.consumed_samples(), d.consumed_tokens()});
  return p;
}

}  // namespace troupe::engine

namespace troupe::engine {

namespace {

std::string replicas(int32_t n) { return fmt::format("{} physical replica{}", n, n == 1 ? "" : "s"); }

std::string layout_text(int32_t dp, int32_t pp, int32_t tp) {
  return fmt::format("data {} x pipeline {} x tensor {}", dp, pp, tp);
}

}  // namespace

void check_resume_layout(const Config& c, const Topology& t, const ckpt::Checkpoint& ck) {
  const auto& written = ck.manifest().topology();
  const int32_t written_physical = written.physical_replicas() > 0 ? written.physical_replicas() : written.data();
  const std::string now = layout_text(t.dp, t.pp, t.tp);
  const std::string then = layout_text(written.data(), written.pipeline(), written.tensor());
  if (written.data() == t.dp && written.pipeline() == t.pp && written.tensor() == t.tp) {
    if (written_physical != t.physical_replicas())
      spdlog::info("checkpoint: logical layout {} written by {}, resumed on {}: a placement change, the run "
                   "continues bit for bit",
                   now, replicas(written_physical), t.physical_replicas());
    return;
  }
  if (c.parallel().physical_replicas() > 0 && t.hosts_several())
    throw config::ConfigError(fmt::format(
        "parallel.physical_replicas: {} place the logical layout {}, but the checkpoint {} was written under the "
        "logical layout {} (by {}). A placement change keeps the logical layout: "
        "set parallel.data = {}, parallel.pipeline = {} and parallel.tensor = {} with physical_replicas dividing "
        "parallel.data; or leave parallel.physical_replicas unset to reshard into the new logical layout (within fp32 "
        "tolerance, not bit for bit)",
        replicas(t.physical_replicas()), now, ck.dir(), then, replicas(written_physical), written.data(),
        written.pipeline(), written.tensor()));
  spdlog::info("checkpoint: written under the logical layout {}, resumed as {}: the state is resharded by name and "
               "global slice, and the run continues within fp32 tolerance, not bit for bit (a change of the logical "
               "layout; docs/checkpoints.md)",
               then, now);
}

}  // namespace troupe::engine
