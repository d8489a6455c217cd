// The acceptance ladder's report: rungs made of sections, sections made of checks.
// A check is one number against one limit fixed before the run (acceptance/
// tolerances.h); a section passes when every check passes. The report is written
// as report.md (for people) and report.json (for tools), both atomically.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "metrics/json.h"

namespace troupe::acceptance {

enum class Status {
  kPass,
  kFail,
  kNotAvailable,   // cannot run here (e.g. a model too large for this CPU); never counted as PASS
  kNotApplicable,  // the layout has no such dimension (e.g. DP parity when DP = 1)
};
const char* status_name(Status s);  // "PASS", "FAIL", "NOT AVAILABLE", "NOT APPLICABLE"

// One measured number against its limit: value <= limit, value >= limit, or
// value == limit (bitwise comparisons report the count of differing elements
// against 0).
struct Check {
  enum class Op { kLe, kGe, kEq };
  std::string what;
  double value = 0;
  Op op = Op::kLe;
  double limit = 0;
  bool pass = false;
};
Check check_le(std::string what, double value, double limit);
Check check_ge(std::string what, double value, double limit);
Check check_eq(std::string what, double value, double expected);
// A yes/no fact (value 1 or 0 against 1).
Check check_true(std::string what, bool ok);
const char* op_text(Check::Op op);  // "<=", ">=", "=="
// "3.1e-08 <= 1e-05" with the numbers in shortest round-trip form.
std::string format_check(const Check& c);

struct Section {
  std::string name;     // "DP parity"
  std::string purpose;  // what it checks, one sentence
  Status status = Status::kFail;
  std::vector<Check> checks;
  std::vector<std::string> notes;  // measurements and context, one line each
  double seconds = 0;

  // kPass when every check passes (and there is at least one), else kFail.
  void decide();
};

struct Rung {
  int number = 0;
  std::string name;
  std::vector<Section> sections;
  // FAIL if any section failed; PASS if at least one passed and none failed;
  // NOT AVAILABLE / NOT APPLICABLE only when no section ran.
  Status status() const;
};

struct Report {
  std::string config_source;     // what the operator passed
  std::string derivation;        // how the small model was derived, one line per field
  std::string small_config;      // the small config as textproto
  std::vector<std::string> tolerances;  // "name = value: why", fixed before the run
  std::vector<Rung> rungs;
  bool broken_normalization = false;  // the test-only switch was on
  double seconds = 0;

  bool passed() const;  // no rung failed
};

metrics::Json to_json(const Report& r);
std::string to_markdown(const Report& r);
// Writes DIR/report.json and DIR/report.md (temporary name, fsync, rename).
void write_report(const Report& r, const std::string& dir);

}  // namespace troupe::acceptance
