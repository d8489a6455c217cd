// The state mirror without actors (engine/state_mirror.h): a shard serialized in memory
// is bit for bit the file a save writes and reads back as a checkpoint; damage is found;
// a step is complete with every shard's record and its position, in any order; a
// rollback's timeline fences what the old one still sends; a start after a failure
// takes the mirror only when it is at least as new as the disk's newest checkpoint.
#include <doctest/doctest.h>

#include <filesystem>
#include <numeric>
#include <set>

#include "ckpt/commit.h"
#include "ckpt/error.h"
#include "ckpt/flat_layout.h"
#include "ckpt/reader.h"
#include "engine/checkpointing.h"
#include "engine/state_mirror.h"
#include "engine/stage_worker.h"
#include "engine/topology.h"
#include "test/support/scratch_dir.h"
#include "test/support/tiny_runtime_config.h"
#include "util/durable_file.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

// DP2 x PP1 tiny model with the distributed optimizer: rank (d, 0, 0) owns half.
Config mirror_config(const std::string& name) {
  Config c = testing::tiny_runtime_config(2, 2, 1);
  c.mutable_parallel()->set_distributed_optimizer(true);
  c.mutable_logging()->set_run_dir(testing::fresh_temp_dir("state-mirror-" + name).string());
  return c;
}

// A shard state of rank r whose values say where they are (so a wrong piece shows).
engine::ShardState state_of(const Config& c, const engine::Rank& r, float base) {
  const int64_t total = engine::stage_registry(c, r).total();
  const int64_t half = (total + 1) / 2;
  engine::ShardState s;
  s.rank = r;
  s.range = {r.dp == 0 ? 0 : half, r.dp == 0 ? half : total};
  const auto n = size_t(s.range.end - s.range.begin);
  for (auto* v : {&s.params, &s.exp_avg, &s.exp_avg_sq}) v->resize(n);
  for (size_t i = 0; i < n; ++i) {
    s.params[i] = base + float(s.range.begin + int64_t(i)) * 1e-3f;
    s.exp_avg[i] = -s.params[i];
    s.exp_avg_sq[i] = s.params[i] * s.params[i];
  }
  return s;
}

}  // namespace

TEST_CASE("a shard serialized in memory is the file a save writes, bit for bit, and reads back") {
  const Config c = mirror_config("bytes");
  const engine::Rank r{1, 0, 0};
  const auto layout = engine::shard_layout(c, r);
  const auto s = state_of(c, r, 0.5f);
  const auto file = engine::shard_file_name(r);
  const auto dir = fs::path(c.logging().run_dir());
  fs::create_directories(dir);
  const ShardFile on_disk = engine::write_shard(layout, s, dir.string(), file, engine::writer_path(r));
  const auto in_memory = engine::serialize_shard(layout, s, file, engine::writer_path(r));
  CHECK(*in_memory.bytes == util::read_file((dir / file).string()));
  CHECK(in_memory.record.SerializeAsString() == on_disk.SerializeAsString());
}

TEST_CASE("the mirror's newest complete step opens as a checkpoint; a damaged byte is found") {
  const Config c = mirror_config("open");
  auto store = std::make_shared<engine::MirrorStore>();
  engine::MirrorBook book(store);
  engine::MirrorAssembly assembly(2);
  const engine::Topology topo = engine::Topology::logical(c);
  engine::TrainingPosition pos;
  pos.step = 3;
  pos.consumed_samples = 24;
  pos.successful_updates = 3;
  // Position first for step 3, records first for step 4: both complete.
  CHECK(!assembly.closed(3, pos));
  std::optional<engine::MirrorAssembly::Complete> done;
  for (int32_t d = 0; d < 2; ++d) {
    const engine::Rank r{d, 0, 0};
    auto shard = engine::serialize_shard(engine::shard_layout(c, r), state_of(c, r, 1.0f), engine::shard_file_name(r),
                                         engine::writer_path(r));
    REQUIRE(store->keep(store->timeline(), 3, engine::shard_file_name(r), shard.bytes));
    done = assembly.kept(3, shard.record);
    CHECK(done.has_value() == (d == 1));
  }
  REQUIRE(done);
  CHECK(done->step == 3);
  CHECK(done->shards.size() == 2);
  book.file(engine::make_manifest(c, topo, {}, done->position, done->shards));
  const auto ck = book.open_newest();
  CHECK(ck->step() == 3);
  CHECK(ck->dir() == "memory: the state mirror of step 3");
  CHECK(ck->manifest().successful_updates() == 3);
  // Every parameter comes back from the two halves, and so do the moments.
  const auto registry = engine::stage_registry(c, {0, 0, 0});
  const auto layout = engine::reading_layout(*ck, registry);
  std::vector<float> params(size_t(registry.total()), 0.0f);
  ckpt::read_flat_range(*ck, layout, TensorPiece::PARAM, 0, registry.total(), params.data());
  int64_t mismatches = 0, read = 0;
  for (const auto& tensor : layout)
    for (int64_t i = tensor.offset; i < tensor.offset + ckpt::box_elements(tensor.box); ++i, ++read)
      if (params[size_t(i)] != 1.0f + float(i) * 1e-3f) ++mismatches;
  CHECK(read > 0);
  CHECK(mismatches == 0);

  // A later step whose records are complete but one byte of whose bytes changed in
  // memory: the CRC-32C finds it, naming the shard.
  engine::TrainingPosition pos4 = pos;
  pos4.step = 4;
  std::vector<ShardFile> records;
  for (int32_t d = 0; d < 2; ++d) {
    const engine::Rank r{d, 0, 0};
    auto shard = engine::serialize_shard(engine::shard_layout(c, r), state_of(c, r, 2.0f), engine::shard_file_name(r),
                                         engine::writer_path(r));
    auto bytes = std::make_shared<std::string>(*shard.bytes);
    if (d == 1) (*bytes)[bytes->size() / 2] ^= 0x10;
    REQUIRE(store->keep(store->timeline(), 4, engine::shard_file_name(r), bytes));
    CHECK(!assembly.kept(4, shard.record));
  }
  const auto done4 = assembly.closed(4, pos4);
  REQUIRE(done4);
  book.file(engine::make_manifest(c, topo, {}, done4->position, done4->shards));
  CHECK(store->find(3, engine::shard_file_name({0, 0, 0})) == nullptr);  // step 3 forgotten once 4 is complete
  try {
    book.open_newest();
    FAIL("a damaged mirror opened");
  } catch (const ckpt::CheckpointError& e) {
    const std::string what = e.what();
    CHECK(what.find("memory: the state mirror of step 4") != std::string::npos);
    CHECK(what.find("dp1_pp0_tp0.shard") != std::string::npos);
    CHECK(what.find("CRC-32C") != std::string::npos);
  }
}

TEST_CASE("the mirror assembly: late records of a step older than a complete one are dropped") {
  engine::MirrorAssembly assembly(1);
  engine::TrainingPosition pos;
  ShardFile record;
  record.set_file("dp0_pp0_tp0.shard");
  pos.step = 5;
  CHECK(!assembly.closed(5, pos));
  CHECK(!assembly.closed(6, pos));
  CHECK(assembly.kept(6, record).has_value());
  CHECK(!assembly.kept(5, record));  // step 6 is newer and complete
  CHECK(!assembly.closed(6, pos));   // once
}

TEST_CASE("a rollback's new timeline fences the copies the old one still sends") {
  engine::MirrorStore store;
  const auto bytes = std::make_shared<const std::string>("x");
  const int64_t before = store.timeline();
  CHECK(store.keep(before, 1, "f", bytes));
  store.clear();
  CHECK(store.timeline() == before + 1);
  CHECK(!store.keep(before, 2, "f", bytes));
  CHECK(store.find(1, "f") == nullptr);
  CHECK(store.find(2, "f") == nullptr);
  for (int64_t step = 1; step <= 6; ++step) CHECK(store.keep(store.timeline(), step, "f", bytes));
  // At most kStepsPerFile steps of one file.
  CHECK(store.find(2, "f") == nullptr);
  CHECK(store.find(3, "f") != nullptr);
  CHECK(store.bytes_held() == int64_t(engine::MirrorStore::kStepsPerFile));
}

TEST_CASE("a start after a failure takes the mirror when it is at least as new as the disk's newest checkpoint") {
  Config c = mirror_config("resume");
  c.mutable_checkpoint()->set_load("latest");
  auto store = std::make_shared<engine::MirrorStore>();
  auto book = std::make_shared<engine::MirrorBook>(store);
  const engine::Topology topo = engine::Topology::logical(c);
  // The mirror of step `step` with the given parameter base.
  auto mirror = [&](int64_t step) {
    std::vector<ShardFile> records;
    for (int32_t d = 0; d < 2; ++d) {
      const engine::Rank r{d, 0, 0};
      auto shard = engine::serialize_shard(engine::shard_layout(c, r), state_of(c, r, float(step)),
                                           engine::shard_file_name(r), engine::writer_path(r));
      store->keep(store->timeline(), step, engine::shard_file_name(r), shard.bytes);
      records.push_back(shard.record);
    }
    engine::TrainingPosition pos;
    pos.step = step;
    pos.successful_updates = step;
    pos.consumed_samples = 8 * step;
    book->file(engine::make_manifest(c, topo, {}, pos, records));
  };
  // A checkpoint of step 4 on disk.
  const auto root = engine::checkpoint_root(c);
  {
    auto commit = ckpt::CheckpointCommit::begin(root, 4);
    std::vector<ShardFile> records;
    for (int32_t d = 0; d < 2; ++d) {
      const engine::Rank r{d, 0, 0};
      records.push_back(engine::write_shard(engine::shard_layout(c, r), state_of(c, r, 4.0f), commit.partial_dir(),
                                            engine::shard_file_name(r), engine::writer_path(r)));
    }
    engine::TrainingPosition pos;
    pos.step = 4;
    pos.successful_updates = 4;
    pos.consumed_samples = 32;
    commit.commit(engine::make_manifest(c, topo, {}, pos, records), 0);
  }
  engine::ResumeSource resume(c, "latest");
  resume.mirror_from(book);
  mirror(6);
  // The first start follows checkpoint.load: the disk.
  REQUIRE(resume.current());
  CHECK(resume.current()->step() == 4);
  CHECK(resume.current()->dir() == root + "/" + ckpt::step_dir_name(4));
  // After a failure: the mirror of step 6, newer than the disk's.
  resume.invalidate();
  CHECK(resume.current()->step() == 6);
  CHECK(resume.current()->dir() == "memory: the state mirror of step 6");
  // A mirror that does not verify: the disk, said in the report.
  store->clear();  // the bytes are gone; the book still names step 6
  resume.invalidate();
  CHECK(resume.current()->step() == 4);
  const auto report = resume.report();
  REQUIRE(!report.empty());
  CHECK(report.front().find("memory: the state mirror of step 6") != std::string::npos);
  CHECK(report.front().find("reading the newest checkpoint on disk instead") != std::string::npos);
  // A disk checkpoint newer than the mirror wins.
  book->clear();
  mirror(3);
  resume.invalidate();
  CHECK(resume.current()->step() == 4);
}

TEST_CASE("cluster mode: the mirror serves when every shard has a live holder; a shard and its buddy lost: the disk") {
  Config c = mirror_config("holders");
  c.mutable_checkpoint()->set_load("latest");
  auto book = std::make_shared<engine::MirrorBook>(nullptr);  // the bytes are on the workers
  const engine::Topology topo = engine::Topology::logical(c);
  std::vector<ShardFile> records;
  engine::MirrorHolderMap holders;
  for (int32_t d = 0; d < 2; ++d) {
    const engine::Rank r{d, 0, 0};
    auto shard = engine::serialize_shard(engine::shard_layout(c, r), state_of(c, r, 5.0f), engine::shard_file_name(r),
                                         engine::writer_path(r));
    records.push_back(shard.record);
    // Worker 1 holds rank 0's shard and its buddy 2 a copy; worker 2 holds rank 1's, worker 1 the copy.
    holders[shard.record.file()] = {r, d == 0 ? std::vector<int32_t>{1, 2} : std::vector<int32_t>{2, 1}};
  }
  engine::TrainingPosition pos;
  pos.step = 5;
  pos.successful_updates = 5;
  pos.consumed_samples = 40;
  book->file(engine::make_manifest(c, topo, {}, pos, records), holders);
  std::set<int32_t> alive{1, 2};
  engine::ResumeSource resume(c, "latest");
  resume.mirror_from(book, [&](int32_t w) { return alive.count(w) > 0; });
  CHECK(resume.current() == nullptr);  // the first start: nothing on disk, a fresh start
  CHECK(resume.mirror_start() == nullptr);
  // Worker 2 lost: its shard is on worker 1 (its buddy), and worker 1's own is there too.
  alive.erase(2);
  resume.invalidate();
  REQUIRE(resume.current());
  CHECK(resume.current()->step() == 5);
  CHECK(resume.current()->dir() == "memory: the state mirror of step 5");
  const auto start = resume.mirror_start();
  REQUIRE(start);
  CHECK(start->step == 5);
  REQUIRE(start->sources.size() == 2);
  CHECK(start->sources[0].second == 1);
  CHECK(start->sources[1].second == 1);
  // Both lost: no live holder; the disk (none here: a fresh start), said in the report.
  alive.clear();
  resume.invalidate();
  CHECK(resume.current() == nullptr);
  CHECK(resume.mirror_start() == nullptr);
  const auto report = resume.report();
  REQUIRE(!report.empty());
  CHECK(report.front().find("no live worker holds") != std::string::npos);
}
