// The JSON form of every record (one object per line of metrics.jsonl; the schema is
// documented in docs/metrics.md). Each object has "type" ("startup", "step", "eval",
// "failure", "summary", "spike") and "time" (Unix seconds). JSON has no NaN or
// infinity: such values are written as the strings "nan", "inf" and "-inf", which
// Python's float() and json_number() below read back.
#pragma once

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

// Reads a "step" object back (metrics.jsonl consumers: reports, tests). Throws
// MetricsError naming the missing or mistyped field.
StepRecord step_from_json(const Json& j);

}  // namespace troupe::metrics
