// The JSON form of every record (one object per line of metrics.jsonl; the schema is
// documented in docs/metrics.md). Each object has "type" ("startup", "step", "eval",
// "failure", "summary", "spike") and "time" (Unix seconds). JSON has no NaN or
// infinity: such values are written as the strings "nan", "inf" and "-inf", which
// Python's float() and json_number() below read back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "metrics/json.h"

#include "metrics/step_record.h"

namespace troupe::metrics {

Json to_json(const StartupRecord& r);
Json to_json(const StepRecord& r);
Json to_json(const EvalRecord& r);
Json to_json(const FailureRecord& r);
Json to_json(const RunSummary& r);

// A double as JSON: a number when finite, else "nan" / "inf" / "-inf".
Json json_number(double v);
// The inverse of json_number; throws MetricsError naming `field` on anything else.
double number_from_json(const Json& v, const char* field);
// A 64-bit hash as 16 lowercase hex digits, and back (nullopt unless exactly 16 hex digits).
std::string hex16(uint64_t v);
std::optional<uint64_t> parse_hex16(const std::string& text);

// Reads a "step" object back (metrics.jsonl consumers: reports, tests). Throws
// MetricsError naming the missing or mistyped field.
StepRecord step_from_json(const Json& j);

}  // namespace troupe::metrics
