// The event files earlier processes left in a run's events/ folder, made to agree with a
// restart marker (a SessionLog START at step s, written when a run resumes or restarts
// from the checkpoint of step s - 1).
//
// TensorBoard reads the folder's files in name order as one stream, and a START at s
// drops every point at step >= s read before it, in any file. Readers that take each file
// alone (tbparse's SummaryReader, which many load runs into pandas with) apply a START
// only inside its own file, so a second process's START leaves the first process's
// points past its checkpoint in place and those steps show twice. Cutting the earlier
// files to what TensorBoard keeps of them makes every reader show the same points:
// each step once, with the values of the timeline that continues. metrics.jsonl keeps
// the superseded steps (its readers take the last line of a step); docs/metrics.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::metrics {

// One earlier event file replaced by a shorter copy.
struct EventFileCut {
  std::string path;
  int64_t dropped_points = 0;     // Summary events (one per step, or an evaluation) dropped
  int64_t first_dropped_step = 0;  // their step range, when dropped_points > 0
  int64_t last_dropped_step = 0;
  int64_t dropped_tail_bytes = 0;  // a torn or damaged last record left by a crash
};

struct SupersededEvents {
  std::vector<EventFileCut> rewritten;
  // Temporaries a rewrite that crashed left behind ("NAME.tmp.PID.N"): TensorBoard reads
  // any file whose name holds "tfevents", so a stale copy would show its steps twice.
  std::vector<std::string> removed_temporaries;
  // One line per file that needed a change and was left as it was, naming the file and why
  // (read-only, unreadable, damaged in the middle, or the rewrite failed); nothing thrown.
  std::vector<std::string> warnings;
};

// Cuts the event files in `dir` (files whose name holds "tfevents", as TensorBoard picks
// them; the caller's own file `own_file_name` excepted) to what TensorBoard shows of them
// once a START at `restart_step` follows them: a Summary event is kept when its step is
// below `restart_step` and below every START that comes after it in name order; every
// other record (the file version, the START markers) is kept. A file that changes, or
// that ends in a torn or damaged last record (a crash's: dropped, never copied on), is
// replaced through util/durable_file.h (temporary, fsync, rename, folder fsync) by the
// kept records, byte for byte; readers see the old file or the new one. Files with
// nothing to drop are not written. A file that needs a cut but is read-only (no write
// permission bit, or not writable by this process), unreadable, or damaged in the middle
// (the records after the damage could be good) is left as it is with a warning, as is
// one whose rewrite fails.
SupersededEvents drop_superseded_events(const std::string& dir, int64_t restart_step,
                                        const std::string& own_file_name);

}  // namespace troupe::metrics
