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

TfRecordScan scan_tfrecords(std::string_view bytes, const std::string& name) {
  TfRecordScan out;
  size_t pos = 0;
  const auto damaged = [&](std::string what, size_t record_end) {
    out.end = TfRecordScan::End::kDamaged;
    out.damage = name + ": record at byte offset " + std::to_string(pos) + what;
    const bool zeros = bytes.find_first_not_of('\0', pos) == std::string_view::npos;
    out.damage_is_tail = record_end == bytes.size() || zeros;
  };
  while (pos < bytes.size()) {
    out.good_bytes = int64_t(pos);
    const size_t left = bytes.size() - pos;
    const char* p = bytes.data() + pos;
    if (left < 12) {
      out.end = TfRecordScan::End::kTorn;
      return out;
    }
    const uint64_t len = get_le(p, 8);
    const uint32_t len_crc = uint32_t(get_le(p + 8, 4));
    const uint32_t want_len_crc = masked_crc(p, 8);
    if (len_crc != want_len_crc) {
      damaged(": length CRC mismatch (stored " + hex(len_crc) + ", computed " + hex(want_len_crc) + ")",
              std::string_view::npos);
      return out;
    }
    if (len > left - 12 || left - 12 - len < 4) {
      out.end = TfRecordScan::End::kTorn;
      return out;
    }
    const char* data = p + 12;
    const uint32_t data_crc = uint32_t(get_le(data + len, 4));
    const uint32_t want_data_crc = masked_crc(data, len);
    if (data_crc != want_data_crc) {
      damaged(" (" + std::to_string(len) + " data bytes): data CRC mismatch (stored " + hex(data_crc) +
                  ", computed " + hex(want_data_crc) + ")",
              pos + kTfRecordOverhead + len);
      return out;
    }
    out.records.push_back({int64_t(pos), std::string_view(data, len)});
    pos += kTfRecordOverhead + len;
  }
  out.good_bytes = int64_t(pos);
  return out;
}

TfRecordContents parse_tfrecords(std::string_view bytes, const std::string& name) {
  const TfRecordScan scan = scan_tfrecords(bytes, name);
  if (scan.end == TfRecordScan::End::kDamaged) throw MetricsError(scan.damage);
  TfRecordContents out;
  out.records.reserve(scan.records.size());
  for (const auto& r : scan.records) out.records.emplace_back(r.data);
  out.truncated_tail = scan.end == TfRecordScan::End::kTorn;
  if (out.truncated_tail) out.truncated_at = scan.good_bytes;
  return out;
}

TfRecordContents read_tfrecord_file(const std::string& path) {
  const std::string bytes = read_file(path);
  return parse_tfrecords(bytes, path);
}

}  // namespace troupe::metrics
