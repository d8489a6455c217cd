#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>

#include "metrics/human_units.h"

using namespace troupe::metrics;

TEST_CASE("format_si: three significant digits with an SI prefix") {
  CHECK(format_si(0) == "0");
  CHECK(format_si(7) == "7");
  CHECK(format_si(950) == "950");
  CHECK(format_si(999.4) == "999");
  CHECK(format_si(999.6) == "1 k");  // rounding carries into the next prefix
  CHECK(format_si(1000) == "1 k");
  CHECK(format_si(12345) == "12.3 k");
  CHECK(format_si(1.2345e6) == "1.23 M");
  CHECK(format_si(1.2e6) == "1.2 M");
  CHECK(format_si(320e3) == "320 k");
  CHECK(format_si(15728640) == "15.7 M");
  CHECK(format_si(2e9) == "2 G");
  CHECK(format_si(1.6e6) == "1.6 M");
  CHECK(format_si(-4.56e3) == "-4.56 k");
  CHECK(format_si(0.125) == "0.125");
  CHECK(format_si(NAN) == "nan");
  CHECK(format_si(INFINITY) == "inf");
  CHECK(format_si(-INFINITY) == "-inf");
}

TEST_CASE("format_rate and format_bytes") {
  CHECK(format_rate(1.2345e6) == "1.23 M tok/s");
  CHECK(format_rate(950) == "950 tok/s");
  CHECK(format_rate(180e3) == "180 k tok/s");
  CHECK(format_bytes(4.5e9) == "4.5 GB");
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(1500) == "1.5 kB");
  // The design card's DP1 main state: 7.8125e9 params x 18 bytes.
  CHECK(format_bytes(7.8125e9 * 18) == "141 GB");
  CHECK(format_bytes(0) == "0 B");
}

TEST_CASE("format_duration picks units by size") {
  CHECK(format_duration(0) == "0.00s");
  CHECK(format_duration(1.234) == "1.23s");
  CHECK(format_duration(9.996) == "10.0s");
  CHECK(format_duration(12.34) == "12.3s");
  CHECK(format_duration(59.96) == "1m00s");
  CHECK(format_duration(185) == "3m05s");
  CHECK(format_duration(3720) == "1h02m");
  CHECK(format_duration(3599.6) == "1h00m");
  CHECK(format_duration(86400 + 4 * 3600 + 59 * 60) == "1d04h");
  // The design card's 72.34 days.
  CHECK(format_duration(72.34 * 86400) == "72d08h");
  CHECK(format_duration(-1) == "--");
  CHECK(format_duration(NAN) == "--");
}

TEST_CASE("format_thousands") {
  CHECK(format_thousands(0) == "0");
  CHECK(format_thousands(999) == "999");
  CHECK(format_thousands(1920) == "1,920");
  CHECK(format_thousands(15728640) == "15,728,640");
  CHECK(format_thousands(-1220701440) == "-1,220,701,440");
  CHECK(format_thousands(INT64_MIN) == "-9,223,372,036,854,775,808");
}
