#include "engine/state_mirror.h"

#include <fmt/format.h>

#include "ckpt/error.h"
#include "ckpt/shard_writer.h"
#include "config/derived.h"

namespace troupe::engine {

SerializedShard serialize_shard(const ckpt::FlatLayout& layout, const model::FlatRange& range, const float* params,
                                const float* exp_avg, const float* exp_avg_sq, const std::string& file,
                                const std::string& writer, std::shared_ptr<std::string> into) {
  auto bytes = into ? std::move(into) : std::make_shared<std::string>();
  // The payload (3 buffers) plus the header, padding and piece table: one allocation.
  bytes->reserve(size_t(range.end - range.begin) * 3 * sizeof(float) + (size_t(1) << 16));
  ckpt::ShardWriter w(bytes.get(), file, writer);
  add_shard_pieces(w, layout, range, params, exp_avg, exp_avg_sq);
  SerializedShard out;
  out.record = w.finish();
  out.bytes = std::move(bytes);
  return out;
}

SerializedShard serialize_shard(const ckpt::FlatLayout& layout, const ShardState& s, const std::string& file,
                                const std::string& writer) {
  return serialize_shard(layout, s.range, s.params.data(), s.exp_avg.data(), s.exp_avg_sq.data(), file, writer);
}

int64_t MirrorStore::timeline() const {
  std::lock_guard lock(mu_);
  return timeline_;
}

std::shared_ptr<std::string> MirrorStore::buffer(const std::string& file) {
  std::lock_guard lock(mu_);
  const auto it = spare_.find(file);
  if (it == spare_.end() || !it->second) return std::make_shared<std::string>();
  auto out = std::move(it->second);
  spare_.erase(it);
  out->clear();  // keeps its capacity
  return out;
}

void MirrorStore::release_locked(const std::string& file, std::shared_ptr<const std::string> bytes) {
  // use_count 1: this store was the last holder (no fetch, no checkpoint in memory reads it).
  if (bytes && bytes.use_count() == 1 && !spare_.count(file))
    spare_[file] = std::const_pointer_cast<std::string>(std::move(bytes));
}

bool MirrorStore::keep(int64_t timeline, int64_t step, const std::string& file,
                       std::shared_ptr<const std::string> bytes) {
  std::lock_guard lock(mu_);
  if (timeline != timeline_) return false;
  auto& steps = by_file_[file];
  if (auto old = steps.find(step); old != steps.end()) release_locked(file, std::move(old->second));
  steps[step] = std::move(bytes);
  while (steps.size() > kStepsPerFile) {
    release_locked(file, std::move(steps.begin()->second));
    steps.erase(steps.begin());
  }
  return true;
}

std::shared_ptr<const std::string> MirrorStore::find(int64_t step, const std::string& file) const {
  std::lock_guard lock(mu_);
  const auto f = by_file_.find(file);
  if (f == by_file_.end()) return nullptr;
  const auto s = f->second.find(step);
  return s == f->second.end() ? nullptr : s->second;
}

void MirrorStore::forget_before(int64_t step) {
  std::lock_guard lock(mu_);
  for (auto& [file, steps] : by_file_) {
    const auto end = steps.lower_bound(step);
    for (auto it = steps.begin(); it != end; ++it) release_locked(file, std::move(it->second));
    steps.erase(steps.begin(), end);
  }
}

void MirrorStore::clear() {
  std::lock_guard lock(mu_);
  by_file_.clear();
  spare_.clear();
  ++timeline_;
}

int64_t MirrorStore::bytes_held() const {
  std::lock_guard lock(mu_);
  int64_t n = 0;
  for (const auto& [file, steps] : by_file_)
    for (const auto& [step, bytes] : steps) n += bytes ? int64_t(bytes->size()) : 0;
  return n;
}

std::optional<MirrorAssembly::Complete> MirrorAssembly::closed(int64_t step, const TrainingPosition& position) {
  if (step <= completed_) return std::nullopt;
  pending_[step].position = position;
  return take_if_complete(step);
}

std::optional<MirrorAssembly::Complete> MirrorAssembly::kept(int64_t step, ShardFile record, MirrorHolders holders) {
  if (step <= completed_) return std::nullopt;
  auto name = record.file();
  auto& p = pending_[step];
  p.shards[name] = std::move(record);
  if (!holders.workers.empty()) p.holders[name] = std::move(holders);
  return take_if_complete(step);
}

std::optional<MirrorAssembly::Complete> MirrorAssembly::take_if_complete(int64_t step) {
  auto& p = pending_.at(step);
  if (!p.position || p.shards.size() < shards_) return std::nullopt;
  Complete done{step, *p.position, {}, std::move(p.holders)};
  for (auto& [file, record] : p.shards) done.shards.push_back(std::move(record));
  completed_ = step;
  // Older steps can no longer be the newest complete one.
  pending_.erase(pending_.begin(), pending_.upper_bound(step));
  return done;
}

void MirrorBook::file(CheckpointManifest manifest, MirrorHolderMap holders) {
  std::lock_guard lock(mu_);
  if (newest_ && newest_->step() >= manifest.step()) return;
  const int64_t step = manifest.step();
  newest_ = std::move(manifest);
  holders_ = std::move(holders);
  if (store_) store_->forget_before(step);
}

MirrorHolderMap MirrorBook::holders() const {
  std::lock_guard lock(mu_);
  return holders_;
}

std::optional<CheckpointManifest> MirrorBook::newest() const {
  std::lock_guard lock(mu_);
  return newest_;
}

std::shared_ptr<const ckpt::Checkpoint> MirrorBook::open_newest() const {
  std::lock_guard lock(mu_);
  if (!newest_) throw ckpt::CheckpointError("the state mirror holds no complete step");
  if (!store_) throw std::logic_error("MirrorBook::open_newest: the bytes are on the workers (cluster mode)");
  std::map<std::string, std::shared_ptr<const std::string>> bytes;
  for (const auto& shard : newest_->shard())
    if (auto b = store_->find(newest_->step(), shard.file())) bytes[shard.file()] = std::move(b);
  return std::make_shared<const ckpt::Checkpoint>(
      ckpt::Checkpoint::from_memory(mirror_label(newest_->step()), *newest_, bytes));
}

void MirrorBook::clear() {
  std::lock_guard lock(mu_);
  newest_.reset();
  holders_.clear();
  if (store_) store_->clear();
}

bool state_mirror_on(const Config& c) {
  switch (c.supervision().state_mirror()) {
    case SupervisionConfig::STATE_MIRROR_ON: return true;
    case SupervisionConfig::STATE_MIRROR_OFF: return false;
    case SupervisionConfig::STATE_MIRROR_AUTO: break;
  }
  // A buddy on another worker exists with more than one physical replica.
  return c.cluster().workers() > 1 && config::physical_replicas(c) > 1;
}

std::string mirror_label(int64_t step) { return fmt::format("memory: the state mirror of step {}", step); }

}  // namespace troupe::engine
