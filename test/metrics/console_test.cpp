#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "metrics/console.h"

using namespace troupe::metrics;

namespace {

// True when every column of the step table ends at its fixed right edge: a
// non-blank character there, a blank (or the end of the text) right after it.
// Column widths 7 10 9 10 11 6 6 13 10 9, one space between columns.
bool aligned(const std::string& line) {
  for (size_t end : {6, 17, 27, 38, 50, 57, 64, 78, 89, 99}) {
    if (end >= line.size() || line[end] == ' ') return false;
    if (end + 1 < line.size() && line[end + 1] != ' ') return false;
  }
  return true;
}

StepRecord sample_step() {
  StepRecord r;
  r.step = 12;
  r.consumed_samples = 96;
  r.loss = 3.14159;
  r.lr = 2.5e-4;
  r.grad_norm = 1.23456;
  r.clipped = true;
  r.input_tokens = 8 * 64;
  r.loss_tokens = 500;
  r.padding_tokens = 12;
  r.step_time_s = 0.025;
  return r;
}

}  // namespace

TEST_CASE("step line: values in fixed columns under the header") {
  const StepRecord r = sample_step();
  const std::string header = step_header();
  const std::string line = step_line(r);
  CHECK(header == "   step    samples      loss         lr   grad_norm   clip   skip         tok/s   loss_tok   padding");
  CHECK(line ==   "     12         96    3.1416  2.500e-04      1.2346    yes      -          20 k        500        12");
  // tok/s = (512 - 12) / 0.025 = 20,000.
  CHECK(aligned(header));
  CHECK(aligned(line));

  // A skipped step with a non-finite norm keeps the same columns.
  StepRecord s = r;
  s.step = 1234567;
  s.consumed_samples = 9876543210;
  s.skipped = true;
  s.clipped = false;
  s.grad_norm = INFINITY;
  s.loss = NAN;
  const std::string skipped = step_line(s);
  CHECK(aligned(skipped));
  CHECK(skipped.find("  nan ") != std::string::npos);
  CHECK(skipped.find(" inf ") != std::string::npos);

  // A huge norm switches to an exponent rather than widening the column.
  s.grad_norm = 123456789.0;
  CHECK(aligned(step_line(s)));
  CHECK(step_line(s).find("1.235e+08") != std::string::npos);

  s.recomputed = true;
  const std::string recomputed = step_line(s);
  CHECK(recomputed.substr(recomputed.size() - 14) == "  (recomputed)");
}

TEST_CASE("progress bar with ETA") {
  CHECK(progress_bar(0, 320, 0.0, 20) == "[....................]    0/320    0.0%  0.00s elapsed  ETA --");
  // 80 of 320 in 60 s: 240 left at 0.75 s each = 3 minutes.
  CHECK(progress_bar(80, 320, 60.0, 20) == "[#####...............]   80/320   25.0%  1m00s elapsed  ETA 3m00s");
  CHECK(progress_bar(319, 320, 100.0, 10) == "[#########.]  319/320   99.7%  1m40s elapsed  ETA 0.31s");
  CHECK(progress_bar(320, 320, 100.0, 10) == "[##########]  320/320  100.0%  1m40s elapsed  ETA 0.00s");
  // Out-of-range input is clamped, never overflows the bar.
  CHECK(progress_bar(500, 320, 100.0, 4) == "[####]  320/320  100.0%  1m40s elapsed  ETA 0.00s");
}

TEST_CASE("is_terminal on a regular file is false") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  CHECK_FALSE(is_terminal(f));
  CHECK_FALSE(is_terminal(nullptr));
  std::fclose(f);
}

TEST_CASE("summary block from accumulated steps") {
  RunSummary s;
  s.status = "completed";
  StepRecord r = sample_step();
  for (int i = 1; i <= 40; ++i) {
    r.step = i;
    r.consumed_samples = 8 * i;
    r.loss = 5.0 - 0.05 * i;
    r.clipped = i <= 3;
    r.skipped = i == 7;
    accumulate(s, r);
  }
  s.last_eval_loss = 3.25;
  s.elapsed_s = 65;
  s.spikes = 1;
  CHECK(s.steps == 40);
  CHECK(s.skipped_steps == 1);
  CHECK(s.clipped_steps == 3);
  CHECK(s.input_tokens == 40 * 512);
  CHECK(s.train_time_s == doctest::Approx(1.0));
  CHECK(tokens_per_second(s) == doctest::Approx(40.0 * 500 / 1.0));
  CHECK(summary_block(s) ==
        "run completed: 40 steps (1 skipped, 3 clipped), 320 samples consumed\n"
        "tokens: 20,480 input, 20,000 loss-bearing, 480 padding\n"
        "loss: 4.9500 -> 3.0000 (last eval 3.2500)\n"
        "throughput: 20 k tok/s over 1.00s of steps (wall 1m05s)\n"
        "restarts: 0, spikes: 1\n");
}
