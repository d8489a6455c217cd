// TFRecord framing, the container of TensorBoard event files. Each record is
//
//   uint64 length               little-endian
//   uint32 masked_crc(length)   CRC-32C of those 8 bytes, masked (util/crc32c.h)
//   byte   data[length]
//   uint32 masked_crc(data)
//
// so a reader can tell a torn or damaged record from a good one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::metrics {

// Header and footer bytes around each record's data.
inline constexpr size_t kTfRecordOverhead = 8 + 4 + 4;

// The framed bytes of one record.
std::string frame_tfrecord(std::string_view data);

struct TfRecordContents {
  std::vector<std::string> records;
  // The file ended inside a record (a writer still writing, or a crash): the
  // complete records before it are returned, this is set, nothing is thrown.
  bool truncated_tail = false;
  int64_t truncated_at = 0;  // byte offset of that incomplete record
};

// Splits `bytes` into records, checking both CRCs of every record. A CRC mismatch
// throws MetricsError naming `name`, the record's byte offset and which CRC failed.
TfRecordContents parse_tfrecords(std::string_view bytes, const std::string& name);

// parse_tfrecords over a file's contents.
TfRecordContents read_tfrecord_file(const std::string& path);

}  // namespace troupe::metrics
