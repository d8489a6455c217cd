// The JSON type of troupe_metrics: nlohmann's order-preserving object, so that every
// line of metrics.jsonl reads "type", "time", then the fields in their documented order.
#pragma once

#include <nlohmann/json.hpp>

namespace troupe::metrics {

using Json = nlohmann::ordered_json;

}  // namespace troupe::metrics
