#include "acceptance/report.h"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "metrics/files.h"
#include "metrics/json_records.h"

namespace troupe::acceptance {
namespace {

// Integers print whole, other numbers with 4 significant digits.
std::string number(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", int64_t(v));
  return fmt::format("{:.4g}", v);
}

Check make(std::string what, double value, Check::Op op, double limit) {
  Check c{std::move(what), value, op, limit, false};
  switch (op) {
    case Check::Op::kLe: c.pass = value <= limit; break;  // NaN fails
    case Check::Op::kGe: c.pass = value >= limit; break;
    case Check::Op::kEq: c.pass = value == limit; break;
  }
  return c;
}

// A '|' inside a Markdown table cell is written "\|".
std::string cell(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '|') out += '\\';
    out += ch;
  }
  return out;
}

}  // namespace

const char* status_name(Status s) {
  switch (s) {
    case Status::kPass: return "PASS";
    case Status::kFail: return "FAIL";
    case Status::kNotAvailable: return "NOT AVAILABLE";
    case Status::kNotApplicable: return "NOT APPLICABLE";
  }
  return "?";
}

Check check_le(std::string what, double value, double limit) { return make(std::move(what), value, Check::Op::kLe, limit); }
Check check_ge(std::string what, double value, double limit) { return make(std::move(what), value, Check::Op::kGe, limit); }
Check check_eq(std::string what, double value, double expected) {
  return make(std::move(what), value, Check::Op::kEq, expected);
}
Check check_true(std::string what, bool ok) { return make(std::move(what), ok ? 1 : 0, Check::Op::kEq, 1); }

const char* op_text(Check::Op op) {
  switch (op) {
    case Check::Op::kLe: return "<=";
    case Check::Op::kGe: return ">=";
    case Check::Op::kEq: return "==";
  }
  return "?";
}

std::string format_check(const Check& c) {
  return fmt::format("{} {} {}", number(c.value), op_text(c.op), number(c.limit));
}

void Section::decide() {
  bool all = !checks.empty();
  for (const auto& c : checks) all = all && c.pass;
  status = all ? Status::kPass : Status::kFail;
}

Status Rung::status() const {
  bool any_pass = false, any_fail = false, any_unavailable = false;
  for (const auto& s : sections) {
    any_pass |= s.status == Status::kPass;
    any_fail |= s.status == Status::kFail;
    any_unavailable |= s.status == Status::kNotAvailable;
  }
  if (any_fail) return Status::kFail;
  if (any_pass) return Status::kPass;
  return any_unavailable ? Status::kNotAvailable : Status::kNotApplicable;
}

bool Report::passed() const {
  for (const auto& r : rungs)
    if (r.status() == Status::kFail) return false;
  return !rungs.empty();
}

metrics::Json to_json(const Report& r) {
  metrics::Json j;
  j["passed"] = r.passed();
  j["config"] = r.config_source;
  j["broken_loss_normalization"] = r.broken_normalization;
  j["seconds"] = r.seconds;
  j["derivation"] = r.derivation;
  j["small_config"] = r.small_config;
  j["tolerances"] = r.tolerances;
  auto& rungs = j["rungs"] = metrics::Json::array();
  for (const auto& rung : r.rungs) {
    metrics::Json jr;
    jr["rung"] = rung.number;
    jr["name"] = rung.name;
    jr["status"] = status_name(rung.status());
    auto& sections = jr["sections"] = metrics::Json::array();
    for (const auto& s : rung.sections) {
      metrics::Json js;
      js["name"] = s.name;
      js["purpose"] = s.purpose;
      js["status"] = status_name(s.status);
      js["seconds"] = s.seconds;
      auto& checks = js["checks"] = metrics::Json::array();
      for (const auto& c : s.checks)
        checks.push_back({{"what", c.what},
                          {"value", metrics::json_number(c.value)},
                          {"op", op_text(c.op)},
                          {"limit", metrics::json_number(c.limit)},
                          {"pass", c.pass}});
      js["notes"] = s.notes;
      sections.push_back(std::move(js));
    }
    rungs.push_back(std::move(jr));
  }
  return j;
}

std::string to_markdown(const Report& r) {
  std::string md = "# Acceptance report\n\n";
  md += fmt::format("Config: {}  \nResult: **{}** ({:.1f} s)\n", r.config_source.empty() ? "(embedded default)" : r.config_source,
                    r.passed() ? "PASS" : "FAIL", r.seconds);
  if (r.broken_normalization)
    md += "\n**Test switch on: the loss-normalization section averages microbatch means "
          "(a deliberately broken objective); its FAIL is the expected outcome.**\n";
  md += "\n## Evidence\n\n| rung | what the owner checks | result |\n| --- | --- | --- |\n";
  for (const auto& rung : r.rungs) {
    std::string parts;
    for (const auto& s : rung.sections) parts += fmt::format("{}{}: {}", parts.empty() ? "" : "; ", s.name, status_name(s.status));
    md += fmt::format("| {}. {} | {} | {} |\n", rung.number, rung.name, cell(parts), status_name(rung.status()));
  }
  md += "\n## Small model\n\n" + r.derivation + "\n";
  md += "\n## Tolerances (fixed in code before the run)\n\n";
  for (const auto& t : r.tolerances) md += "- " + t + "\n";
  for (const auto& rung : r.rungs) {
    md += fmt::format("\n## Rung {}: {} — {}\n", rung.number, rung.name, status_name(rung.status()));
    for (const auto& s : rung.sections) {
      md += fmt::format("\n### {} — {} ({:.2f} s)\n\n{}\n", s.name, status_name(s.status), s.seconds, s.purpose);
      if (!s.checks.empty()) {
        md += "\n| check | value | limit | result |\n| --- | ---: | ---: | --- |\n";
        for (const auto& c : s.checks)
          md += fmt::format("| {} | {} | {} {} | {} |\n", cell(c.what), number(c.value), op_text(c.op), number(c.limit),
                            c.pass ? "PASS" : "FAIL");
      }
      if (!s.notes.empty()) {
        md += "\n";
        for (const auto& n : s.notes) md += "- " + n + "\n";
      }
    }
  }
  md += "\n## Config of the small model\n\n```\n" + r.small_config + "```\n";
  return md;
}

void write_report(const Report& r, const std::string& dir) {
  std::filesystem::create_directories(dir);
  metrics::write_file_atomic((std::filesystem::path(dir) / "report.json").string(), to_json(r).dump(2) + "\n");
  metrics::write_file_atomic((std::filesystem::path(dir) / "report.md").string(), to_markdown(r));
}

}  // namespace troupe::acceptance
