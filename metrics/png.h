// A minimal PNG encoder for troupe's own plots (`supervisor compare --plot`): 8-bit RGB,
// no interlacing, filter type 0 on every row, the image data deflated by zlib. The file
// is the signature and three chunks (IHDR, IDAT, IEND), each with its CRC-32.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::metrics {

// An RGB raster, row-major from the top-left, 3 bytes a pixel.
struct Raster {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;

  Raster(int w, int h, uint32_t background = 0xffffff);
  // 0xRRGGBB; a pixel outside the raster is ignored (or 0 when read).
  void set(int x, int y, uint32_t color);
  uint32_t at(int x, int y) const;
};

// The bytes of a PNG file holding `r`.
std::string encode_png(const Raster& r);

// encode_png written to `path` atomically (metrics::write_file_atomic).
void write_png(const std::string& path, const Raster& r);

}  // namespace troupe::metrics
