// Every rule a Config must satisfy before anything runs on it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/origins.h"
#include "messages/config.pb.h"

namespace troupe::config {

// One broken rule: the field it is reported against and what is wrong, e.g.
// {"batch.global_batch_size",
//  "10 is not divisible by micro_batch_size x parallel.data = 4"}.
struct Violation {
  std::string field;
  std::string rule;
  // Other fields the rule reads: when `field` was left at its default, the error
  // points at the first of these that the input set.
  std::vector<std::string> related = {};
};

// All broken rules. Single-field rules (ranges, signs) come first; the rules
// that combine fields are checked only when every single field is sane, so a
// zero never reaches a division.
std::vector<Violation> violations(const Config& c);

// "<where>: <field>: <rule>" with <where> from origins (file:line, --set ..., ...).
std::string describe(const Violation& v, const Origins& origins);

// Throws ConfigError describing the first violation; returns when there is none.
void validate(const Config& c, const Origins& origins);

// Why an injected fault's actor path is malformed, or nullopt when it is well formed.
// Syntax: a kind then coordinates, '/'-separated: "coordinator", "loader/dp0",
// "stage/dp1/pp0/tp0". A kind is [a-z][a-z0-9_]*; a coordinate is letters then a
// decimal index (dp1, pp0, tp12), each letter prefix at most once. Whether such an
// actor exists is for the runtime to say.
std::optional<std::string> actor_path_problem(std::string_view path);

}  // namespace troupe::config
