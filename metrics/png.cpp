#include "metrics/png.h"

#include <zlib.h>

#include "metrics/error.h"
#include "metrics/files.h"

namespace troupe::metrics {
namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(char((v >> s) & 0xff));
}

// Length, type, data, CRC-32 of type and data.
void chunk(std::string& out, const char type[5], const std::string& data) {
  put_u32(out, uint32_t(data.size()));
  const std::string body = std::string(type, 4) + data;
  out += body;
  put_u32(out, uint32_t(crc32(0, reinterpret_cast<const Bytef*>(body.data()), uInt(body.size()))));
}

}  // namespace

Raster::Raster(int w, int h, uint32_t background) : width(w), height(h), rgb(size_t(w) * size_t(h) * 3) {
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) set(x, y, background);
}

void Raster::set(int x, int y, uint32_t color) {
  if (x < 0 || y < 0 || x >= width || y >= height) return;
  uint8_t* p = &rgb[(size_t(y) * size_t(width) + size_t(x)) * 3];
  p[0] = uint8_t(color >> 16);
  p[1] = uint8_t(color >> 8);
  p[2] = uint8_t(color);
}

uint32_t Raster::at(int x, int y) const {
  if (x < 0 || y < 0 || x >= width || y >= height) return 0;
  const uint8_t* p = &rgb[(size_t(y) * size_t(width) + size_t(x)) * 3];
  return uint32_t(p[0]) << 16 | uint32_t(p[1]) << 8 | p[2];
}

std::string encode_png(const Raster& r) {
  if (r.width <= 0 || r.height <= 0) throw MetricsError("png: empty raster");
  std::string raw;  // each row: filter type 0, then its pixels
  raw.reserve(size_t(r.height) * (size_t(r.width) * 3 + 1));
  for (int y = 0; y < r.height; ++y) {
    raw.push_back(0);
    raw.append(reinterpret_cast<const char*>(&r.rgb[size_t(y) * size_t(r.width) * 3]), size_t(r.width) * 3);
  }
  uLongf size = compressBound(uLong(raw.size()));
  std::string packed(size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(packed.data()), &size, reinterpret_cast<const Bytef*>(raw.data()),
                uLong(raw.size()), 9) != Z_OK)
    throw MetricsError("png: zlib compress2 failed");
  packed.resize(size);

  std::string out = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  put_u32(ihdr, uint32_t(r.width));
  put_u32(ihdr, uint32_t(r.height));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8 bits, RGB, deflate, filter 0, no interlace
  chunk(out, "IHDR", ihdr);
  chunk(out, "IDAT", packed);
  chunk(out, "IEND", "");
  return out;
}

void write_png(const std::string& path, const Raster& r) { write_file_atomic(path, encode_png(r)); }

}  // namespace troupe::metrics
