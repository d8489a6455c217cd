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
