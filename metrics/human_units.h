// Numbers for people: "1.23 M tok/s", "4.5 GB", "1h02m", "1,920". Decimal (SI)
// prefixes throughout, as the design card's memory figures are (1 GB = 1e9 bytes).
#pragma once

#include <cstdint>
#include <string>

namespace troupe::metrics {

// Three significant digits with an SI prefix and trailing zeros dropped:
// 950 -> "950", 12345 -> "12.3 k", 1.2345e6 -> "1.23 M", 2e9 -> "2 G". Prefixes k M G T P E;
// below 1 the value is printed as is with 3 significant digits ("0.125"). Non-finite: "nan",
// "inf", "-inf".
std::string format_si(double value);

// format_si + " tok/s" (a space after the prefix: "1.23 M tok/s", "950 tok/s").
std::string format_rate(double tokens_per_s, const char* unit = "tok/s");

// Bytes with SI units: 4.5e9 -> "4.5 GB", 512 -> "512 B", 1.5e3 -> "1.5 kB".
std::string format_bytes(double bytes);

// Durations: < 10 s "1.23s", < 60 s "12.3s", < 1 h "3m05s", < 1 d "1h02m", else "2d04h".
// Negative or non-finite: "--".
std::string format_duration(double seconds);

// Integers with thousands separators: 1920 -> "1,920", -15728640 -> "-15,728,640".
std::string format_thousands(int64_t value);

}  // namespace troupe::metrics
