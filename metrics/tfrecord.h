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

// What a reader can use of a stream that may be damaged: the checked records before the
// first torn or damaged one, each with where it lies, and what ends the good part.
// Nothing is thrown; TensorBoard's reader likewise stops at the first bad record.
struct TfRecordScan {
  struct Record {
    int64_t offset = 0;     // of its header in the stream
    std::string_view data;  // into the scanned bytes
    int64_t framed_size() const { return int64_t(data.size() + kTfRecordOverhead); }
  };
  enum class End {
    kClean,    // every byte belongs to a good record
    kTorn,     // the stream ends inside a record (a writer still writing, or a crash)
    kDamaged,  // a record fails its length or data CRC
  };
  std::vector<Record> records;
  End end = End::kClean;
  int64_t good_bytes = 0;  // bytes up to the end of the last good record (the torn or damaged one starts here)
  // kDamaged: "NAME: record at byte offset N...: ... CRC mismatch (stored ..., computed ...)".
  std::string damage;
  // kDamaged, and nothing readable can follow: the damaged record ends exactly where the
  // stream does, or every byte from it on is zero (a crash of the machine that left the
  // file longer than what reached the disk). A crash leaves this; damage in the middle
  // of a file is something else.
  bool damage_is_tail = false;
};
TfRecordScan scan_tfrecords(std::string_view bytes, const std::string& name);

// parse_tfrecords over a file's contents.
TfRecordContents read_tfrecord_file(const std::string& path);

}  // namespace troupe::metrics
