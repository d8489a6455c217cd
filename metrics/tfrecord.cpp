#include "metrics/tfrecord.h"

#include <cstdio>

#include "metrics/error.h"
#include "metrics/files.h"
#include "util/crc32c.h"

namespace troupe::metrics {
namespace {

// Fixed-width little-endian integers, independent of the host's byte order.
void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}

uint64_t get_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

uint32_t masked_crc(const char* p, size_t n) { return util::crc32c_masked(util::crc32c(p, n)); }

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

}  // namespace

std::string frame_tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + kTfRecordOverhead);
  put_le(out, data.size(), 8);
  put_le(out, masked_crc(out.data(), 8), 4);
  out.append(data);
  put_le(out, masked_crc(data.data(), data.size()), 4);
  return out;
}

TfRecordContents parse_tfrecords(std::string_view bytes, const std::string& name) {
  TfRecordContents out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t left = bytes.size() - pos;
    const char* p = bytes.data() + pos;
    if (left < 12) {
      out.truncated_tail = true;
      out.truncated_at = int64_t(pos);
      break;
    }
    const uint64_t len = get_le(p, 8);
    const uint32_t len_crc = uint32_t(get_le(p + 8, 4));
    const uint32_t want_len_crc = masked_crc(p, 8);
    if (len_crc != want_len_crc)
      throw MetricsError(name + ": record at byte offset " + std::to_string(pos) + ": length CRC mismatch (stored " +
                         hex(len_crc) + ", computed " + hex(want_len_crc) + ")");
    if (len > left - 12 || left - 12 - len < 4) {
      out.truncated_tail = true;
      out.truncated_at = int64_t(pos);
      break;
    }
    const char* data = p + 12;
    const uint32_t data_crc = uint32_t(get_le(data + len, 4));
    const uint32_t want_data_crc = masked_crc(data, len);
    if (data_crc != want_data_crc)
      throw MetricsError(name + ": record at byte offset " + std::to_string(pos) + " (" + std::to_string(len) +
                         " data bytes): data CRC mismatch (stored " + hex(data_crc) + ", computed " +
                         hex(want_data_crc) + ")");
    out.records.emplace_back(data, len);
    pos += kTfRecordOverhead + len;
  }
  return out;
}

TfRecordContents read_tfrecord_file(const std::string& path) {
  const std::string bytes = read_file(path);
  return parse_tfrecords(bytes, path);
}

}  // namespace troupe::metrics
