#include "data/compressed_input.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <zlib.h>
#include <zstd.h>

#include "data/error.h"

namespace troupe::data {
namespace {

constexpr size_t kChunk = size_t(1) << 20;  // decompressed bytes handed on at a time

void gunzip(const std::string& path, std::string_view in, const std::function<void(std::string_view)>& on_text,
            const std::function<void(size_t)>& on_consumed) {
  z_stream z{};
  // 16 + MAX_WBITS: gzip headers only (a zlib or raw deflate stream is not a .gz).
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw DataError(path + ": gzip: cannot start zlib");
  const std::unique_ptr<z_stream, int (*)(z_stream*)> end(&z, inflateEnd);  // also when on_text throws
  std::vector<char> out(kChunk);
  size_t pos = 0;
  auto fail = [&](const std::string& why) {
    throw DataError(fmt::format("{}: gzip: {} at compressed offset {}", path, why, pos));
  };
  // Until the last member's end: each call takes what input is left and gives at
  // most a chunk, so output still held after the input is all in comes out too.
  for (;;) {
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + pos));
    z.avail_in = uInt(std::min<size_t>(in.size() - pos, size_t(1) << 30));
    const uInt offered = z.avail_in;
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = uInt(out.size());
    const int rc = inflate(&z, Z_NO_FLUSH);
    pos += offered - z.avail_in;
    const size_t produced = out.size() - z.avail_out;
    if (produced > 0) on_text(std::string_view(out.data(), produced));
    if (on_consumed) on_consumed(pos);
    if (rc == Z_STREAM_END) {
      if (pos == in.size()) break;
      // Another member follows (concatenated .gz files): start again on the rest.
      if (inflateReset(&z) != Z_OK) fail("cannot restart for the next member");
      continue;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR) fail(pos == in.size() ? "the data ends inside a member" : "no progress");
    fail(z.msg ? z.msg : "damaged data");
  }
}

void unzstd(const std::string& path, std::string_view in, const std::function<void(std::string_view)>& on_text,
            const std::function<void(size_t)>& on_consumed) {
  ZSTD_DStream* d = ZSTD_createDStream();
  if (!d) throw DataError(path + ": zstd: cannot start libzstd");
  const std::unique_ptr<ZSTD_DStream, size_t (*)(ZSTD_DStream*)> free_stream(d, ZSTD_freeDStream);
  std::vector<char> out(kChunk);
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  size_t last = 0;  // what the last call asked for more: 0 at a frame's end
  auto fail = [&](const std::string& why) {
    throw DataError(fmt::format("{}: zstd: {} at compressed offset {}", path, why, input.pos));
  };
  // Frames one after another decompress as one stream.
  while (input.pos < input.size) {
    ZSTD_outBuffer output{out.data(), out.size(), 0};
    const size_t before = input.pos;
    last = ZSTD_decompressStream(d, &output, &input);
    if (ZSTD_isError(last)) fail(ZSTD_getErrorName(last));
    if (output.pos > 0) on_text(std::string_view(out.data(), output.pos));
    if (on_consumed) on_consumed(input.pos);
    if (output.pos == 0 && input.pos == before) fail("no progress");
  }
  // Output still held inside libzstd once the input is all in.
  while (last != 0) {
    ZSTD_outBuffer output{out.data(), out.size(), 0};
    last = ZSTD_decompressStream(d, &output, &input);
    if (ZSTD_isError(last)) fail(ZSTD_getErrorName(last));
    if (output.pos == 0) {
      if (last != 0) fail("the data ends inside a frame");
      break;
    }
    on_text(std::string_view(out.data(), output.pos));
  }
}

}  // namespace

Compression compression_of(std::string_view b) {
  if (b.size() >= 2 && uint8_t(b[0]) == 0x1f && uint8_t(b[1]) == 0x8b) return Compression::Gzip;
  if (b.size() >= 4 && uint8_t(b[0]) == 0x28 && uint8_t(b[1]) == 0xb5 && uint8_t(b[2]) == 0x2f &&
      uint8_t(b[3]) == 0xfd)
    return Compression::Zstd;
  return Compression::None;
}

const char* compression_name(Compression c) {
  switch (c) {
    case Compression::Gzip: return "gzip";
    case Compression::Zstd: return "zstd";
    case Compression::None: return "none";
  }
  return "?";
}

void decompress(const std::string& path, std::string_view compressed, Compression c,
                const std::function<void(std::string_view)>& on_text, const std::function<void(size_t)>& on_consumed) {
  switch (c) {
    case Compression::Gzip: return gunzip(path, compressed, on_text, on_consumed);
    case Compression::Zstd: return unzstd(path, compressed, on_text, on_consumed);
    case Compression::None:
      on_text(compressed);
      if (on_consumed) on_consumed(compressed.size());
      return;
  }
}

}  // namespace troupe::data
