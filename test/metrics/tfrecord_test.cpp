#include <doctest/doctest.h>

#include <string>

#include "metrics/error.h"
#include "metrics/tfrecord.h"

using namespace troupe::metrics;

namespace {

std::string to_hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

}  // namespace

TEST_CASE("TFRecord framing matches bytes computed by TensorBoard's own masked CRC-32C") {
  // Expected values produced by tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c
  // over struct.pack('<Q', len) and the data.
  CHECK(to_hex(frame_tfrecord("")) == "000000000000000029039807d8ea82a2");
  CHECK(to_hex(frame_tfrecord("hello")) == "0500000000000000eab2043e68656c6c6fbb1f1c19");
  CHECK(frame_tfrecord(std::string(1000, 'x')).size() == 1000 + kTfRecordOverhead);
}

TEST_CASE("TFRecord round trip: every record back, in order, CRCs checked") {
  std::string stream;
  std::vector<std::string> records = {"", "a", std::string(70000, '\0'), "brain.Event:2", std::string(255, '\xff')};
  for (const auto& r : records) stream += frame_tfrecord(r);
  const auto parsed = parse_tfrecords(stream, "mem");
  CHECK_FALSE(parsed.truncated_tail);
  CHECK(parsed.records == records);
}

TEST_CASE("TFRecord reader: a torn last record is reported, not thrown") {
  const std::string a = frame_tfrecord("first"), b = frame_tfrecord("second record");
  for (size_t cut : {size_t(1), size_t(11), size_t(12), size_t(15), b.size() - 1}) {
    const auto parsed = parse_tfrecords(a + b.substr(0, cut), "mem");
    CHECK(parsed.truncated_tail);
    CHECK(parsed.truncated_at == int64_t(a.size()));
    REQUIRE(parsed.records.size() == 1);
    CHECK(parsed.records[0] == "first");
  }
}

TEST_CASE("TFRecord reader: a damaged byte fails its CRC, naming the offset") {
  const std::string a = frame_tfrecord("first"), b = frame_tfrecord("second record");
  std::string bad_len = a + b;
  bad_len[a.size() + 2] ^= 0x01;  // inside b's length
  CHECK_THROWS_WITH_AS(parse_tfrecords(bad_len, "events.out.tfevents.x"),
                       doctest::Contains("events.out.tfevents.x: record at byte offset 21: length CRC mismatch"),
                       MetricsError);
  std::string bad_data = a + b;
  bad_data[a.size() + 12 + 3] ^= 0x40;  // inside b's data
  CHECK_THROWS_WITH_AS(parse_tfrecords(bad_data, "f"),
                       doctest::Contains("f: record at byte offset 21 (13 data bytes): data CRC mismatch"),
                       MetricsError);
  std::string bad_footer = a + b;
  bad_footer[bad_footer.size() - 1] ^= 0x80;  // b's data CRC itself
  CHECK_THROWS_AS(parse_tfrecords(bad_footer, "f"), MetricsError);
  std::string bad_len_crc = a + b;
  bad_len_crc[9] ^= 0x01;  // a's length CRC
  CHECK_THROWS_WITH_AS(parse_tfrecords(bad_len_crc, "f"), doctest::Contains("record at byte offset 0: length CRC"),
                       MetricsError);
}

TEST_CASE("TFRecord scan: every good record with its offset, and what ends them, without throwing") {
  const std::string a = frame_tfrecord("first"), b = frame_tfrecord("second record");
  const auto clean = scan_tfrecords(a + b, "f");
  CHECK(clean.end == TfRecordScan::End::kClean);
  REQUIRE(clean.records.size() == 2);
  CHECK(clean.records[1].offset == int64_t(a.size()));
  CHECK(clean.records[1].data == "second record");
  CHECK(clean.records[1].framed_size() == int64_t(b.size()));
  CHECK(clean.good_bytes == int64_t(a.size() + b.size()));

  const auto torn = scan_tfrecords(a + b.substr(0, 5), "f");
  CHECK(torn.end == TfRecordScan::End::kTorn);
  CHECK(torn.good_bytes == int64_t(a.size()));
  CHECK(torn.records.size() == 1);

  // A damaged last record and a zero-filled tail are a crash's; damage with a good record
  // after it is not.
  std::string last_bad = a + b;
  last_bad[a.size() + 14] ^= 0x01;
  const auto tail = scan_tfrecords(last_bad, "f");
  CHECK(tail.end == TfRecordScan::End::kDamaged);
  CHECK(tail.damage_is_tail);
  CHECK(tail.good_bytes == int64_t(a.size()));
  CHECK(tail.damage.find("f: record at byte offset 21 (13 data bytes): data CRC mismatch") == 0);
  const auto zeros = scan_tfrecords(a + b + std::string(40, '\0'), "f");
  CHECK(zeros.end == TfRecordScan::End::kDamaged);
  CHECK(zeros.damage_is_tail);
  CHECK(zeros.records.size() == 2);
  std::string middle = a + b + a;
  middle[a.size() + 14] ^= 0x01;
  const auto inside = scan_tfrecords(middle, "f");
  CHECK(inside.end == TfRecordScan::End::kDamaged);
  CHECK_FALSE(inside.damage_is_tail);
  CHECK(inside.records.size() == 1);
}
