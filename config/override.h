// Command-line overrides: `--set field.path=value`.
#pragma once

#include <string_view>

#include "config/origins.h"
#include "messages/config.pb.h"

namespace troupe::config {

// Applies one "field.path=value" to `cfg` and records "--set <assignment>" as the
// field's origin. The path names a scalar field through its messages
// ("batch.seq_length", "optimizer.lr"); a repeated message takes an index, where
// index == current size appends ("faults.fault[0].actor=stage/dp0/pp0/tp0").
// Values are written as in a textproto: numbers, true/false, enum names; strings
// with or without quotes. Throws ConfigError "--set <assignment>: <path>: <what>".
// Does not validate the result (config/validate.h does, after all overrides).
void apply_override(Config& cfg, std::string_view assignment, Origins* origins = nullptr);

}  // namespace troupe::config
