#include "metrics/superseded_events.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <regex>
#include <system_error>

#include "messages/tensorboard.pb.h"
#include "metrics/tfrecord.h"
#include "util/durable_file.h"

namespace troupe::metrics {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kNoStart = std::numeric_limits<int64_t>::max();

bool names_event_file(const std::string& name) { return name.find("tfevents") != std::string::npos; }

// util/durable_file.h's temporary name for `target`: "<target>.tmp.<pid>.<n>".
bool is_temporary(const std::string& name) {
  static const std::regex pattern(R"(.*\.tmp\.[0-9]+\.[0-9]+)");
  return std::regex_match(name, pattern);
}

// The event files of `dir` in TensorBoard's reading order (byte order of the names) and
// the stale temporaries among them.
struct Listing {
  std::vector<std::string> files, temporaries;
};

Listing list_event_files(const std::string& dir, const std::string& own_file_name, SupersededEvents& out) {
  Listing listing;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    out.warnings.push_back(dir + ": cannot list the event files: " + ec.message() + "; none was cut");
    return listing;
  }
  for (const fs::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    if (!names_event_file(name) || name == own_file_name) continue;
    std::error_code type_ec;
    if (!entry.is_regular_file(type_ec)) continue;
    (is_temporary(name) ? listing.temporaries : listing.files).push_back(entry.path().string());
  }
  std::sort(listing.files.begin(), listing.files.end());
  std::sort(listing.temporaries.begin(), listing.temporaries.end());
  return listing;
}

// A file this process must not replace: no write permission bit at all (a file someone
// made read-only; root's access(2) would say yes), or access(2) says no.
bool is_read_only(const struct stat& st, const std::string& path) {
  return (st.st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)) == 0 || ::access(path.c_str(), W_OK) != 0;
}

// One earlier file read, its records judged against the START steps that follow it.
struct FilePlan {
  std::string bytes;
  TfRecordScan scan;
  std::vector<bool> keep;          // per scanned record
  int64_t smallest_start = kNoStart;  // of the START markers in the file
  EventFileCut cut;
  bool drops_tail = false;
};

// `cut`: the smallest START step after this file (or the restart step).
void judge(FilePlan& plan, int64_t cut) {
  const auto& records = plan.scan.records;
  plan.keep.assign(records.size(), true);
  for (size_t k = records.size(); k-- > 0;) {
    tensorboard::Event event;
    if (!event.ParseFromArray(records[k].data.data(), int(records[k].data.size()))) continue;  // not ours to judge
    if (event.has_session_log() && event.session_log().status() == tensorboard::SessionLog::START) {
      cut = std::min(cut, event.step());
      plan.smallest_start = std::min(plan.smallest_start, event.step());
    } else if (event.has_summary() && event.step() >= cut) {
      plan.keep[k] = false;
      EventFileCut& c = plan.cut;
      c.first_dropped_step = c.dropped_points == 0 ? event.step() : std::min(c.first_dropped_step, event.step());
      c.last_dropped_step = c.dropped_points == 0 ? event.step() : std::max(c.last_dropped_step, event.step());
      ++c.dropped_points;
    }
  }
}

std::string points_text(const EventFileCut& c) {
  const std::string steps = c.first_dropped_step == c.last_dropped_step
                                ? "step " + std::to_string(c.first_dropped_step)
                                : "steps " + std::to_string(c.first_dropped_step) + "-" +
                                      std::to_string(c.last_dropped_step);
  return std::to_string(c.dropped_points) + " superseded point" + (c.dropped_points == 1 ? "" : "s") + " (" + steps +
         ")";
}

// What staying unchanged costs, for a warning.
std::string left_as_it_is(const EventFileCut& c) {
  if (c.dropped_points == 0) return "left as it is";
  return "left as it is: its " + points_text(c) +
         " stay, so readers that take each file alone (tbparse) show those steps twice";
}

void rewrite(const FilePlan& plan, mode_t mode) {
  util::AtomicFileWriter writer(plan.cut.path, mode & 07777);
  for (size_t k = 0; k < plan.scan.records.size(); ++k) {
    if (!plan.keep[k]) continue;
    const auto& r = plan.scan.records[k];
    writer.write(plan.bytes.data() + r.offset, size_t(r.framed_size()));
  }
  writer.commit();
}

// Reads and judges one file, rewrites it when it changes; returns its smallest START.
int64_t cut_file(const std::string& path, int64_t cut, SupersededEvents& out) {
  FilePlan plan;
  plan.cut.path = path;
  try {
    plan.bytes = util::read_file(path, "event file");
  } catch (const util::FileError& e) {
    out.warnings.push_back(std::string(e.what()) + "; left as it is");
    return kNoStart;
  }
  plan.scan = scan_tfrecords(plan.bytes, path);
  judge(plan, cut);
  const bool damaged_inside = plan.scan.end == TfRecordScan::End::kDamaged && !plan.scan.damage_is_tail;
  plan.drops_tail = plan.scan.end != TfRecordScan::End::kClean && !damaged_inside;
  if (plan.drops_tail) plan.cut.dropped_tail_bytes = int64_t(plan.bytes.size()) - plan.scan.good_bytes;
  if (plan.cut.dropped_points == 0 && !plan.drops_tail) return plan.smallest_start;
  if (damaged_inside) {
    // Records after the damage may still be good: a copy without them would lose them.
    out.warnings.push_back(plan.scan.damage + "; " + left_as_it_is(plan.cut));
    return plan.smallest_start;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    out.warnings.push_back(path + ": stat: " + std::strerror(errno) + "; " + left_as_it_is(plan.cut));
    return plan.smallest_start;
  }
  if (is_read_only(st, path)) {
    out.warnings.push_back(path + ": read-only; " + left_as_it_is(plan.cut));
    return plan.smallest_start;
  }
  try {
    rewrite(plan, st.st_mode);
  } catch (const util::FileError& e) {
    out.warnings.push_back(path + ": cannot rewrite it (" + e.what() + "); " + left_as_it_is(plan.cut));
    return plan.smallest_start;
  }
  out.rewritten.push_back(plan.cut);
  return plan.smallest_start;
}

}  // namespace

SupersededEvents drop_superseded_events(const std::string& dir, int64_t restart_step,
                                        const std::string& own_file_name) {
  SupersededEvents out;
  const Listing listing = list_event_files(dir, own_file_name, out);
  for (const std::string& temp : listing.temporaries) {
    std::error_code ec;
    if (fs::remove(temp, ec))
      out.removed_temporaries.push_back(temp);
    else if (ec)
      out.warnings.push_back(temp + ": a stale temporary copy of an event file, cannot remove it: " + ec.message());
  }
  // Last file first: a START purges the points before it in its own file and in every
  // file read earlier, so each file's cut is the smallest START of the files after it.
  int64_t cut = restart_step;
  const size_t first_file_warning = out.warnings.size();
  for (size_t i = listing.files.size(); i-- > 0;) cut = std::min(cut, cut_file(listing.files[i], cut, out));
  std::reverse(out.rewritten.begin(), out.rewritten.end());  // in name order
  std::reverse(out.warnings.begin() + std::ptrdiff_t(first_file_warning), out.warnings.end());
  return out;
}

}  // namespace troupe::metrics
