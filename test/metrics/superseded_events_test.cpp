// Event files after a second process resumes a run: every reader shows each step once,
// with the values of the timeline that continues (metrics/superseded_events.h).
//
// The folder is read back three ways, with troupe's own TFRecord reader:
//  - TensorBoard's rule: every file in name order as one stream; a SessionLog START at s
//    drops every point at step >= s read before it (EventAccumulator's purge);
//  - tbparse's rule: each file alone, with that purge inside the file only (one
//    EventAccumulator per file, as SummaryReader(dir) makes), all files' points together;
//  - every Summary event of every file, no purge at all (a plain record iterator).
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "messages/tensorboard.pb.h"
#include "metrics/files.h"
#include "metrics/tensorboard_writer.h"
#include "metrics/tfrecord.h"
#include "test/support/scratch_dir.h"
#include "util/durable_file.h"

using namespace troupe::metrics;
using troupe::testing::ScratchDir;
namespace fs = std::filesystem;
namespace tb = troupe::tensorboard;

namespace {

// tag -> (step, value) in reading order.
using Points = std::map<std::string, std::vector<std::pair<int64_t, float>>>;

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<tb::Event> events_of(const std::string& path) {
  std::vector<tb::Event> out;
  for (const auto& record : read_tfrecord_file(path).records) {
    tb::Event e;
    REQUIRE(e.ParseFromString(record));
    out.push_back(e);
  }
  return out;
}

// The points of `events` read in order, each START dropping what came before it at its
// step or later (with `purge`).
void read_stream(const std::vector<tb::Event>& events, bool purge, Points& points) {
  for (const auto& e : events) {
    if (purge && e.has_session_log() && e.session_log().status() == tb::SessionLog::START) {
      for (auto& [tag, list] : points)
        list.erase(std::remove_if(list.begin(), list.end(), [&](const auto& p) { return p.first >= e.step(); }),
                   list.end());
    }
    if (e.has_summary())
      for (const auto& v : e.summary().value()) points[v.tag()].emplace_back(e.step(), v.simple_value());
  }
}

Points tensorboard_rule(const std::string& dir) {
  std::vector<tb::Event> stream;
  for (const auto& f : event_files(dir))
    for (auto& e : events_of(f)) stream.push_back(std::move(e));
  Points points;
  read_stream(stream, /*purge=*/true, points);
  return points;
}

Points tbparse_rule(const std::string& dir) {
  Points all;
  for (const auto& f : event_files(dir)) {
    Points one;
    read_stream(events_of(f), /*purge=*/true, one);
    for (auto& [tag, list] : one) all[tag].insert(all[tag].end(), list.begin(), list.end());
  }
  return all;
}

Points every_event(const std::string& dir) {
  Points all;
  for (const auto& f : event_files(dir)) read_stream(events_of(f), /*purge=*/false, all);
  return all;
}

StepRecord step_of(int64_t i, double loss_offset) {
  StepRecord r;
  r.step = i;
  r.loss = 6.0 - 0.125 * double(i) + loss_offset;
  r.lr = 1e-4;
  r.grad_norm = 0.5;
  r.input_tokens = 512;
  r.loss_tokens = 500;
  r.step_time_s = 0.5;
  r.wall_time = 1700000000.0 + double(i);
  return r;
}

void write_steps(EventFileWriter& w, int64_t from, int64_t to, double loss_offset) {
  for (int64_t i = from; i <= to; ++i) w.step(step_of(i, loss_offset));
}

void write_eval(EventFileWriter& w, int64_t step, double loss) {
  EvalRecord e;
  e.step = step;
  e.loss = loss;
  e.wall_time = 1700000000.5 + double(step);
  w.eval(e);
}

// The loss curve a timeline made of (last step, loss offset) pieces shows, in step order.
std::vector<std::pair<int64_t, float>> loss_curve(const std::vector<std::pair<int64_t, double>>& pieces) {
  std::vector<std::pair<int64_t, float>> out;
  int64_t step = 1;
  for (const auto& [last, offset] : pieces)
    for (; step <= last; ++step) out.emplace_back(step, float(step_of(step, offset).loss));
  return out;
}

// Each reader's points of `tag`, sorted by step, must be `want` (so each step once).
void check_every_reader(const std::string& dir, const std::string& tag,
                        const std::vector<std::pair<int64_t, float>>& want) {
  const std::vector<std::pair<const char*, Points>> readers = {
      {"TensorBoard's rule", tensorboard_rule(dir)},
      {"tbparse's rule", tbparse_rule(dir)},
      {"every event", every_event(dir)}};
  for (const auto& [name, points] : readers) {
    CAPTURE(name);
    CAPTURE(tag);
    auto got = points.count(tag) ? points.at(tag) : std::vector<std::pair<int64_t, float>>{};
    std::stable_sort(got.begin(), got.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    CHECK(got == want);
  }
}

// Steps 1..20 with an evaluation after 16 and after 20, then a crash: the first process
// of a run whose last checkpoint is step 16. Returns its file's path.
std::string first_process(const std::string& dir) {
  EventFileWriter w(dir, 1700000000.0);
  write_steps(w, 1, 16, 0);
  write_eval(w, 16, 3.0);
  write_steps(w, 17, 20, 0);
  write_eval(w, 20, 2.5);
  return w.path();
}

// A second process resuming from the checkpoint of step 16: its marker, steps 17-24 with
// other losses and an evaluation at 24. Returns what the marker cut.
SupersededEvents resume_at_16(const std::string& dir) {
  EventFileWriter w(dir, 1700000100.0);
  const SupersededEvents cut = w.session_start(17, 1700000100.0);
  write_steps(w, 17, 24, 0.25);
  write_eval(w, 24, 2.0);
  return cut;
}

void throw_before_rename(const std::string&, const std::string&) {
  throw troupe::util::FileError("simulated crash before the rename");
}

}  // namespace

TEST_CASE("a second process resumes from step 16 after the first reached 20: every reader shows each step once") {
  ScratchDir dir;
  const std::string first = first_process(dir.path());
  const std::string before = read_file(first);
  resume_at_16(dir.path());

  check_every_reader(dir.path(), "loss", loss_curve({{16, 0}, {24, 0.25}}));
  check_every_reader(dir.path(), "eval/loss", {{16, 3.0f}, {24, 2.0f}});
  check_every_reader(dir.path(), "restarts", [] {
    std::vector<std::pair<int64_t, float>> zeros;
    for (int64_t s = 1; s <= 24; ++s) zeros.emplace_back(s, 0.0f);
    return zeros;
  }());

  // The first file keeps its records up to the evaluation of step 16, byte for byte.
  const std::string after = read_file(first);
  CHECK(after.size() < before.size());
  CHECK(after == before.substr(0, after.size()));
  CHECK(read_tfrecord_file(first).records.size() == 1 + 16 + 1);
  // No temporary is left behind, and the second process's file still opens with the marker.
  REQUIRE(event_files(dir.path()).size() == 2);
  const auto second = events_of(event_files(dir.path())[1]);
  REQUIRE(second.size() >= 2);
  CHECK(second[0].file_version() == "brain.Event:2");
  CHECK(second[1].session_log().status() == tb::SessionLog::START);
  CHECK(second[1].step() == 17);
}

TEST_CASE("what the cut reports: the file, its dropped points and steps; a clean earlier file is not written") {
  ScratchDir dir;
  const std::string first = first_process(dir.path());
  const auto cut = resume_at_16(dir.path());
  CHECK(cut.warnings.empty());
  CHECK(cut.removed_temporaries.empty());
  REQUIRE(cut.rewritten.size() == 1);
  CHECK(cut.rewritten[0].path == first);
  CHECK(cut.rewritten[0].dropped_points == 5);  // steps 17-20 and the evaluation at 20
  CHECK(cut.rewritten[0].first_dropped_step == 17);
  CHECK(cut.rewritten[0].last_dropped_step == 20);
  CHECK(cut.rewritten[0].dropped_tail_bytes == 0);

  // A third process resuming from step 24 finds nothing to drop and writes nothing.
  struct stat st_before {};
  REQUIRE(::stat(first.c_str(), &st_before) == 0);
  EventFileWriter third(dir.path(), 1700000200.0);
  const auto again = third.session_start(25, 1700000200.0);
  CHECK(again.rewritten.empty());
  CHECK(again.warnings.empty());
  struct stat st_after {};
  REQUIRE(::stat(first.c_str(), &st_after) == 0);
  CHECK(st_after.st_ino == st_before.st_ino);
}

TEST_CASE("an in-run restart inside the first file and its torn last record: both gone from the copy") {
  ScratchDir dir;
  std::string first;
  {
    // Steps 1-10, an in-run restart from the checkpoint of step 8, steps 9-20 anew, then
    // a crash in the middle of writing step 21.
    EventFileWriter w(dir.path(), 1700000000.0);
    write_steps(w, 1, 10, 0);
    w.session_start(9, 1700000011.0);
    write_steps(w, 9, 20, 0.5);
    first = w.path();
  }
  tb::Event torn;
  torn.set_step(21);
  torn.mutable_summary()->add_value()->set_tag("loss");
  const std::string framed = frame_tfrecord(torn.SerializeAsString());
  AppendFile(first, AppendFile::Create::kAppend, false).append(framed.substr(0, framed.size() - 3));

  const auto cut = resume_at_16(dir.path());
  check_every_reader(dir.path(), "loss", loss_curve({{8, 0}, {16, 0.5}, {24, 0.25}}));
  REQUIRE(cut.rewritten.size() == 1);
  CHECK(cut.rewritten[0].dropped_points == 6);  // 9 and 10 of the first timeline, 17-20 of the second
  CHECK(cut.rewritten[0].first_dropped_step == 9);
  CHECK(cut.rewritten[0].last_dropped_step == 20);
  CHECK(cut.rewritten[0].dropped_tail_bytes == int64_t(framed.size() - 3));
  const auto copy = read_tfrecord_file(first);
  CHECK_FALSE(copy.truncated_tail);
  CHECK(copy.records.size() == 1 + 8 + 1 + 8);  // version, 1-8, START 9, 9-16
}

TEST_CASE("a resume from an older checkpoint cuts every earlier process's file, the marker's file included") {
  ScratchDir dir;
  const std::string first = first_process(dir.path());
  std::string second;
  {
    EventFileWriter w(dir.path(), 1700000100.0);
    w.session_start(17, 1700000100.0);
    write_steps(w, 17, 30, 0.25);
    second = w.path();
  }
  // The newest checkpoints were damaged: the third process falls back to step 12.
  EventFileWriter third(dir.path(), 1700000200.0);
  const auto cut = third.session_start(13, 1700000200.0);
  write_steps(third, 13, 18, 0.75);

  check_every_reader(dir.path(), "loss", loss_curve({{12, 0}, {18, 0.75}}));
  check_every_reader(dir.path(), "eval/loss", {});
  REQUIRE(cut.rewritten.size() == 2);
  CHECK(cut.rewritten[0].path == first);
  CHECK(cut.rewritten[0].first_dropped_step == 13);
  CHECK(cut.rewritten[0].last_dropped_step == 16);
  CHECK(cut.rewritten[1].path == second);
  CHECK(cut.rewritten[1].dropped_points == 14);
  const auto rest = events_of(second);  // the version and the START of a timeline that no longer exists
  REQUIRE(rest.size() == 2);
  CHECK(rest[1].session_log().status() == tb::SessionLog::START);
}

TEST_CASE("a file that cannot be cut is left as it was, with one warning naming it and why") {
  ScratchDir dir;
  const std::string first = first_process(dir.path());
  const std::string before = read_file(first);

  SUBCASE("read-only") {
    REQUIRE(::chmod(first.c_str(), 0444) == 0);
    const auto cut = resume_at_16(dir.path());
    CHECK(cut.rewritten.empty());
    REQUIRE(cut.warnings.size() == 1);
    CHECK(cut.warnings[0] == first + ": read-only; left as it is: its 5 superseded points (steps 17-20) stay, so "
                                     "readers that take each file alone (tbparse) show those steps twice");
    CHECK(read_file(first) == before);
  }
  SUBCASE("damaged in the middle: the records after the damage are not thrown away") {
    // Step 18's record: the readers stop there, so of the superseded points they see 17.
    std::string damaged = before;
    const auto records = scan_tfrecords(before, first).records;
    const auto& step18 = records[1 + 16 + 1 + 1];
    damaged[size_t(step18.offset + 12 + 2)] ^= 0x10;
    write_file_atomic(first, damaged);
    const auto cut = resume_at_16(dir.path());
    CHECK(cut.rewritten.empty());
    REQUIRE(cut.warnings.size() == 1);
    CHECK(cut.warnings[0].find(first + ": record at byte offset " + std::to_string(step18.offset)) == 0);
    CHECK(cut.warnings[0].find("data CRC mismatch") != std::string::npos);
    CHECK(cut.warnings[0].find("; left as it is: its 1 superseded point (step 17) stay") != std::string::npos);
    CHECK(read_file(first) == damaged);
  }
  SUBCASE("the rewrite fails: the old file stays whole, no temporary is left") {
    troupe::util::durable_file_hooks().before_rename = throw_before_rename;
    SupersededEvents cut;
    try {
      cut = resume_at_16(dir.path());
    } catch (...) {
      troupe::util::durable_file_hooks().before_rename = nullptr;
      throw;
    }
    troupe::util::durable_file_hooks().before_rename = nullptr;
    CHECK(cut.rewritten.empty());
    REQUIRE(cut.warnings.size() == 1);
    CHECK(cut.warnings[0].find(first + ": cannot rewrite it (simulated crash before the rename); left as it is") ==
          0);
    CHECK(read_file(first) == before);
    CHECK(event_files(dir.path()).size() == 2);
  }
}

TEST_CASE("a crash's leftovers: a zero-filled tail is dropped, a stale temporary copy removed") {
  ScratchDir dir;
  const std::string first = first_process(dir.path());
  const std::string before = read_file(first);
  AppendFile(first, AppendFile::Create::kAppend, false).append(std::string(64, '\0'));
  const std::string temp = first + ".tmp.4242.0";  // util/durable_file.h's name, left by a crash before the rename
  write_file_atomic(temp, before);

  const auto cut = resume_at_16(dir.path());
  CHECK(cut.warnings.empty());
  REQUIRE(cut.removed_temporaries.size() == 1);
  CHECK(cut.removed_temporaries[0] == temp);
  CHECK_FALSE(fs::exists(temp));
  REQUIRE(cut.rewritten.size() == 1);
  CHECK(cut.rewritten[0].dropped_tail_bytes == 64);
  check_every_reader(dir.path(), "loss", loss_curve({{16, 0}, {24, 0.25}}));
}
