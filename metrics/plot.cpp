#include "metrics/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "metrics/error.h"
#include "metrics/human_units.h"

namespace troupe::metrics {
namespace {

// 5 x 7 glyphs, one string of 7 rows of 5 bits each ('#' set).
struct Glyph {
  char c;
  const char* rows[7];
};

constexpr Glyph kFont[] = {
    {'0', {".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."}},
    {'1', {"..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."}},
    {'2', {".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"}},
    {'3', {"####.", "....#", "....#", ".###.", "....#", "....#", "####."}},
    {'4', {"...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."}},
    {'5', {"#####", "#....", "####.", "....#", "....#", "#...#", ".###."}},
    {'6', {"..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."}},
    {'7', {"#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."}},
    {'8', {".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."}},
    {'9', {".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."}},
    {'.', {".....", ".....", ".....", ".....", ".....", ".##..", ".##.."}},
    {'-', {".....", ".....", ".....", "#####", ".....", ".....", "....."}},
    {':', {".....", ".##..", ".##..", ".....", ".##..", ".##..", "....."}},
    {'(', {"...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#."}},
    {')', {".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..."}},
    {'k', {"#....", "#....", "#..#.", "#.#..", "##...", "#.#..", "#..#."}},
    {'M', {"#...#", "##.##", "#.#.#", "#.#.#", "#...#", "#...#", "#...#"}},
    {'G', {".###.", "#...#", "#....", "#.###", "#...#", "#...#", ".####"}},
    {'a', {".....", ".....", ".###.", "....#", ".####", "#...#", ".####"}},
    {'d', {"....#", "....#", ".##.#", "#..##", "#...#", "#...#", ".####"}},
    {'e', {".....", ".....", ".###.", "#...#", "#####", "#....", ".###."}},
    {'h', {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "#...#"}},
    {'i', {"..#..", ".....", ".##..", "..#..", "..#..", "..#..", ".###."}},

    {'l', {".##..", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."}},
    {'m', {".....", ".....", "##.#.", "#.#.#", "#.#.#", "#...#", "#...#"}},
    {'n', {".....", ".....", "#.##.", "##..#", "#...#", "#...#", "#...#"}},
    {'o', {".....", ".....", ".###.", "#...#", "#...#", "#...#", ".###."}},
    {'r', {".....", ".....", "#.##.", "##..#", "#....", "#....", "#...."}},
    {'s', {".....", ".....", ".####", "#....", ".###.", "....#", "####."}},
    {'t', {".#...", ".#...", "###..", ".#...", ".#...", ".#..#", "..##."}},
    {'v', {".....", ".....", "#...#", "#...#", "#...#", ".#.#.", "..#.."}},
    {'w', {".....", ".....", "#...#", "#...#", "#.#.#", "#.#.#", ".#.#."}},
};

const Glyph* glyph(char c) {
  for (const auto& g : kFont)
    if (g.c == c) return &g;
  return nullptr;
}

uint32_t lighter(uint32_t c) {
  auto mix = [](uint32_t v) { return v + (255 - v) * 3 / 5; };
  return mix(c >> 16 & 0xff) << 16 | mix(c >> 8 & 0xff) << 8 | mix(c & 0xff);
}

void line(Raster& r, int x0, int y0, int x1, int y1, uint32_t color, int thick = 1) {
  const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
  int err = dx + dy;
  for (;;) {
    for (int a = 0; a < thick; ++a)
      for (int b = 0; b < thick; ++b) r.set(x0 + a - thick / 2, y0 + b - thick / 2, color);
    if (x0 == x1 && y0 == y1) break;
    const int e2 = 2 * err;
    if (e2 >= dy) err += dy, x0 += sx;
    if (e2 <= dx) err += dx, y0 += sy;
  }
}

void box(Raster& r, int x, int y, int half, uint32_t color) {
  for (int a = -half; a <= half; ++a)
    for (int b = -half; b <= half; ++b) r.set(x + a, y + b, color);
}

std::string loss_label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// One panel: loss against x (tokens or seconds) inside the frame [left, right] x [top, bottom].
struct Panel {
  int left, top, right, bottom;
  double x0, x1, y0, y1;
  int px(double x) const { return left + int(std::lround((x - x0) / (x1 - x0) * (right - left))); }
  int py(double y) const {
    const double c = std::clamp(y, y0, y1);
    return bottom - int(std::lround((c - y0) / (y1 - y0) * (bottom - top)));
  }
};

void frame(Raster& r, const Panel& p, const std::string& title, bool time_axis) {
  const uint32_t axis = 0x404040, grid = 0xe8e8e8;
  for (int i = 0; i <= 4; ++i) {
    const double xv = p.x0 + (p.x1 - p.x0) * i / 4, yv = p.y0 + (p.y1 - p.y0) * i / 4;
    const int x = p.px(xv), y = p.py(yv);
    line(r, x, p.top, x, p.bottom, grid);
    line(r, p.left, y, p.right, y, grid);
    const std::string xl = time_axis ? format_duration(xv) : format_si(xv);
    draw_text(r, x - int(xl.size()) * 3, p.bottom + 6, xl, axis);
    const std::string yl = loss_label(yv);
    draw_text(r, p.left - 6 - int(yl.size()) * 6, y - 3, yl, axis);
  }
  line(r, p.left, p.top, p.left, p.bottom, axis);
  line(r, p.left, p.bottom, p.right, p.bottom, axis);
  line(r, p.right, p.top, p.right, p.bottom, axis);
  line(r, p.left, p.top, p.right, p.top, axis);
  draw_text(r, (p.left + p.right) / 2 - int(title.size()) * 3, p.bottom + 20, title, axis);
}

}  // namespace

uint32_t run_color(size_t i) {
  constexpr uint32_t kColors[] = {0x1f77b4, 0xd62728, 0x2ca02c, 0xff7f0e, 0x9467bd, 0x8c564b, 0xe377c2, 0x17becf};
  return kColors[i % (sizeof kColors / sizeof kColors[0])];
}

int draw_text(Raster& r, int x, int y, const std::string& text, uint32_t color) {
  int cx = x;
  for (char c : text) {
    if (const Glyph* g = glyph(c))
      for (int row = 0; row < 7; ++row)
        for (int col = 0; col < 5; ++col)
          if (g->rows[row][col] == '#') r.set(cx + col, y + row, color);
    cx += 6;
  }
  return cx - x;
}

Raster plot_runs(const std::vector<RunHistory>& runs, TokenAxis axis) {
  const auto tokens = [axis](const RunPosition& p) {
    return double(axis == TokenAxis::Input ? p.input_tokens : p.loss_tokens);
  };
  // The loss range: every validation pass and the training losses up to their 98th
  // percentile (one spike would otherwise flatten every curve; higher ones are drawn
  // at the top edge).
  std::vector<double> train;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, max_tokens = 0, max_wall = 0;
  for (const auto& h : runs) {
    for (const auto& s : h.steps)
      if (std::isfinite(s.record.loss)) {
        train.push_back(s.record.loss);
        lo = std::min(lo, s.record.loss);
      }
    for (const auto& e : h.evals)
      if (std::isfinite(e.loss)) {
        lo = std::min(lo, e.loss);
        hi = std::max(hi, e.loss);
      }
    if (!h.steps.empty()) {
      max_tokens = std::max(max_tokens, tokens(h.steps.back().at));
      max_wall = std::max(max_wall, h.steps.back().at.wall_s);
    }
    if (!h.evals.empty()) max_wall = std::max(max_wall, h.evals.back().at.wall_s);
  }
  if (train.empty()) throw MetricsError("plot: no run has a finite training loss");
  std::sort(train.begin(), train.end());
  hi = std::max(hi, train[size_t(double(train.size() - 1) * 0.98)]);
  if (!(hi > lo)) hi = lo + 1;
  const double pad = (hi - lo) * 0.05;

  Raster r(1000, 420);
  const Panel panels[2] = {{70, 30, 480, 370, 0, std::max(max_tokens, 1.0), lo - pad, hi + pad},
                           {570, 30, 980, 370, 0, std::max(max_wall, 1e-3), lo - pad, hi + pad}};
  frame(r, panels[0], "tokens", false);
  frame(r, panels[1], "wall time", true);
  for (int k = 0; k < 2; ++k) {
    const Panel& p = panels[k];
    const auto x_of = [&](const RunPosition& at) { return k == 0 ? tokens(at) : at.wall_s; };
    for (size_t i = 0; i < runs.size(); ++i) {
      const uint32_t c = run_color(i);
      const auto& h = runs[i];
      for (size_t s = 1; s < h.steps.size(); ++s) {
        const auto &a = h.steps[s - 1], &b = h.steps[s];
        if (std::isfinite(a.record.loss) && std::isfinite(b.record.loss))
          line(r, p.px(x_of(a.at)), p.py(a.record.loss), p.px(x_of(b.at)), p.py(b.record.loss), lighter(c));
      }
      for (size_t e = 0; e < h.evals.size(); ++e) {
        const auto& v = h.evals[e];
        if (!std::isfinite(v.loss)) continue;
        if (e > 0 && std::isfinite(h.evals[e - 1].loss))
          line(r, p.px(x_of(h.evals[e - 1].at)), p.py(h.evals[e - 1].loss), p.px(x_of(v.at)), p.py(v.loss), c, 2);
        box(r, p.px(x_of(v.at)), p.py(v.loss), 3, c);
      }
    }
  }
  // The legend, in the left panel's top-right corner.
  for (size_t i = 0; i < runs.size(); ++i) {
    const int y = 40 + int(i) * 14;
    box(r, 440, y + 3, 4, run_color(i));
    draw_text(r, 450, y, std::to_string(i + 1), 0x404040);
  }
  draw_text(r, 70, 10, "val loss: dots   train loss: lines", 0x404040);
  return r;
}

}  // namespace troupe::metrics
