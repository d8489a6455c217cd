// What a person reads on the terminal: the step line under its header, a progress
// bar with ETA, and the final summary block. Pure functions returning text (no
// trailing newline unless stated); the caller decides where it goes.
#pragma once

#include <cstdio>
#include <string>

#include "metrics/step_record.h"

namespace troupe::metrics {

// The header above the step lines; its columns line up with step_line's:
//     step    samples     loss        lr  grad_norm  clip  skip        tok/s  loss_tok  padding
std::string step_header();

// One step, fixed-width right-aligned columns (a column widens only for a value
// too large for it): step, consumed samples, loss (4 decimals), lr (3 significant
// digits, exponent), pre-clip grad norm, "yes"/"-" for clipped and skipped,
// throughput (format_rate's number), loss-bearing tokens, padding tokens. A
// recomputed step ends with "  (recomputed)".
std::string step_line(const StepRecord& r);

// "[##########..........]  45/320  14.1%  1m23s elapsed  ETA 8m27s". ETA assumes the
// remaining steps take the mean time of the done ones ("ETA --" before the first).
// `bar_width` is the number of cells between the brackets.
std::string progress_bar(int64_t done, int64_t total, double elapsed_s, int bar_width = 30);

// True when `f` is a terminal (the progress bar is shown only there).
bool is_terminal(std::FILE* f);

// The block printed at the end of a run, one "label: value" line each, '\n'-terminated:
//   run completed: 40 steps (1 skipped, 3 clipped), 320 samples consumed
//   tokens: 20,480 input, 20,100 loss-bearing, 0 padding
//   loss: 5.5432 -> 2.1234 (last eval 2.2345)
//   throughput: 12.3 k tok/s over 1m02s of steps (wall 1m05s)
//   restarts: 0, spikes: 0 (loss or gradient norm; spikes.jsonl)
std::string summary_block(const RunSummary& s);

}  // namespace troupe::metrics
