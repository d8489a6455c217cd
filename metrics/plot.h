// `supervisor compare --plot FILE.png`: the runs' losses drawn against tokens (left
// panel) and against wall time (right panel), one colour per run (run_color): the
// training loss of every step as a thin line in a lighter shade, the validation passes
// as squares joined by a thick line. Axis ticks are labelled with troupe's own small
// bitmap font; the legend numbers the runs 1, 2, ... in the order given (the command
// prints which is which).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "metrics/compare.h"
#include "metrics/png.h"
#include "metrics/run_history.h"

namespace troupe::metrics {

// The colour of the i-th run (0xRRGGBB; eight colours, then they repeat).
uint32_t run_color(size_t i);

// The plot of `runs`, 1000 x 420 pixels. Throws MetricsError when no run has a finite loss.
Raster plot_runs(const std::vector<RunHistory>& runs, TokenAxis axis);

// Draws `text` with its top-left corner at (x, y), 6 pixels a character (5 x 7 glyphs
// for digits, "kMG", the letters of the axis titles and ". -:()"; other characters
// leave a gap). Returns the width drawn.
int draw_text(Raster& r, int x, int y, const std::string& text, uint32_t color);

}  // namespace troupe::metrics
