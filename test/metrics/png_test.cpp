// The PNG encoder read back byte by byte (signature, chunk lengths, CRC-32s, IHDR, the
// inflated rows), and the comparison plot: each run's colour in both panels.
#include <doctest/doctest.h>

#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "metrics/plot.h"
#include "metrics/png.h"
#include "metrics/run_history.h"

using namespace troupe::metrics;

namespace {

uint32_t u32(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 | uint32_t(uint8_t(s[at + 2])) << 8 |
         uint8_t(s[at + 3]);
}

struct Chunk {
  std::string type, data;
  uint32_t crc = 0;
};

std::vector<Chunk> chunks_of(const std::string& png) {
  std::vector<Chunk> out;
  size_t at = 8;
  while (at + 12 <= png.size()) {
    const uint32_t n = u32(png, at);
    Chunk c{png.substr(at + 4, 4), png.substr(at + 8, n), u32(png, at + 8 + n)};
    out.push_back(c);
    at += 12 + n;
  }
  CHECK(at == png.size());
  return out;
}

Json step(double time, int64_t n, double loss) {
  return {{"type", "step"},   {"time", time},      {"step", n},          {"consumed_samples", 8 * n},
          {"loss", loss},     {"lr", 1e-3},        {"grad_norm", 1.0},   {"clipped", false},
          {"skipped", false}, {"tokens_per_s", 0}, {"input_tokens", 1000}, {"loss_tokens", 900},
          {"padding_tokens", 0}, {"step_time_s", 1.0}, {"restarts", 0},  {"recomputed", false}};
}

}  // namespace

TEST_CASE("PNG: signature, IHDR, CRC-32 of every chunk, rows inflated back with filter 0") {
  Raster r(3, 2, 0x000000);
  r.set(0, 0, 0xff0000);
  r.set(2, 1, 0x0080ff);
  r.set(5, 5, 0xffffff);  // outside: ignored
  CHECK(r.at(0, 0) == 0xff0000);
  CHECK(r.at(1, 0) == 0);
  const std::string png = encode_png(r);
  REQUIRE(png.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
  const auto chunks = chunks_of(png);
  REQUIRE(chunks.size() == 3);
  CHECK(chunks[0].type == "IHDR");
  CHECK(chunks[1].type == "IDAT");
  CHECK(chunks[2].type == "IEND");
  for (const auto& c : chunks) {
    const std::string body = c.type + c.data;
    CHECK(c.crc == uint32_t(crc32(0, reinterpret_cast<const Bytef*>(body.data()), uInt(body.size()))));
  }
  CHECK(chunks[2].crc == 0xAE426082u);  // every PNG's IEND, as published
  REQUIRE(chunks[0].data.size() == 13);
  CHECK(u32(chunks[0].data, 0) == 3);
  CHECK(u32(chunks[0].data, 4) == 2);
  CHECK(chunks[0].data.substr(8) == std::string("\x08\x02\x00\x00\x00", 5));
  std::string raw(2 * (1 + 9), '\x55');
  uLongf n = uLongf(raw.size());
  REQUIRE(uncompress(reinterpret_cast<Bytef*>(raw.data()), &n, reinterpret_cast<const Bytef*>(chunks[1].data.data()),
                     uLong(chunks[1].data.size())) == Z_OK);
  CHECK(n == 20);
  CHECK(raw == std::string("\x00\xff\x00\x00\x00\x00\x00\x00\x00\x00"
                           "\x00\x00\x00\x00\x00\x00\x00\x00\x80\xff",
                           20));
}

TEST_CASE("plot: every run's colour in both panels, the legend, labels drawn") {
  std::vector<Json> a{{{"type", "startup"}, {"time", 0.0}}}, b = a;
  for (int n = 1; n <= 20; ++n) {
    a.push_back(step(n, n, 5.0 - 0.1 * n));
    b.push_back(step(2 * n, n, 5.0 - 0.05 * n));
    if (n % 5 == 0) {
      a.push_back({{"type", "eval"}, {"time", double(n)}, {"step", n}, {"loss", 5.0 - 0.1 * n}});
      b.push_back({{"type", "eval"}, {"time", double(2 * n)}, {"step", n}, {"loss", 5.0 - 0.05 * n}});
    }
  }
  const auto runs = std::vector<RunHistory>{run_history_from("a", a, {}), run_history_from("b", b, {})};
  const Raster r = plot_runs(runs, TokenAxis::Input);
  CHECK(r.width == 1000);
  CHECK(r.height == 420);
  // Count each run's full colour (its validation dots and line) per panel.
  for (size_t i = 0; i < 2; ++i) {
    CAPTURE(i);
    int left = 0, right = 0;
    for (int y = 30; y <= 370; ++y)
      for (int x = 0; x < r.width; ++x)
        if (r.at(x, y) == run_color(i) && !(x >= 436 && x <= 444 && y < 70)) (x < 500 ? left : right)++;
    CHECK(left > 100);
    CHECK(right > 100);
  }
  // Run a's last pass (20,000 tokens, loss 3.0) is the lowest point: at the right end
  // of the left panel's bottom margin band.
  CHECK(r.at(480, 370 - int(std::lround(0.05 / 1.1 * 340))) == run_color(0));
  // The legend's swatches.
  CHECK(r.at(440, 43) == run_color(0));
  CHECK(r.at(440, 57) == run_color(1));
  Raster copy = r;
  CHECK(draw_text(copy, 0, 0, "12", 0) == 12);
  CHECK(copy.at(2, 0) == 0);  // the top of the "1"
}
