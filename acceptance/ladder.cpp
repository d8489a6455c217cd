#include "acceptance/ladder.h"

#include <chrono>
#include <filesystem>

#include <fmt/format.h>
#include <google/protobuf/text_format.h>

#include "acceptance/dataset.h"
#include "acceptance/measure.h"
#include "acceptance/rungs.h"
#include "acceptance/small_config.h"
#include "acceptance/tolerances.h"
#include "config/validate.h"

namespace troupe::acceptance {
namespace {

constexpr int kDatasetGroups = 8;  // 32 documents, 40 windows of 32 tokens

void print_section(std::FILE* out, int rung, const Section& s) {
  if (!out) return;
  std::fprintf(out, "[rung %d] %-40s %s (%.2f s)\n", rung, s.name.c_str(), status_name(s.status), s.seconds);
  for (const auto& c : s.checks)
    std::fprintf(out, "    %-4s %s: %s\n", c.pass ? "ok" : "FAIL", c.what.c_str(), format_check(c).c_str());
  for (const auto& n : s.notes) std::fprintf(out, "    - %s\n", n.c_str());
  std::fflush(out);
}

}  // namespace

Report run_acceptance(const Config& config, const AcceptanceOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  namespace fs = std::filesystem;
  const fs::path out = options.out_dir;
  fs::create_directories(out);
  const std::string prefix =
      write_acceptance_dataset((out / "data" / "acceptance").string(), kSmallSeqLength, kDatasetGroups,
                               config.training().seed());
  auto small = derive_small_model(config, prefix, options.max_ranks);
  config::validate(small.config, config::Origins("the acceptance small model"));

  LadderContext ctx;
  ctx.config = config;
  ctx.small = small.config;
  ctx.runs_root = (out / "runs").string();
  ctx.break_loss_normalization = options.break_loss_normalization;

  Report report;
  report.config_source = options.config_source;
  report.derivation = small.derivation;
  google::protobuf::TextFormat::PrintToString(small.config, &report.small_config);
  report.tolerances = tol::describe();
  report.broken_normalization = options.break_loss_normalization;

  std::FILE* con = options.console;
  if (con) {
    std::fprintf(con, "acceptance ladder for %s\nsmall model:\n%s\n",
                 options.config_source.empty() ? "the embedded default config" : options.config_source.c_str(),
                 small.derivation.c_str());
    std::fflush(con);
  }
  auto add = [&](Rung& rung, Section s) {
    print_section(con, rung.number, s);
    rung.sections.push_back(std::move(s));
  };
  auto add_all = [&](Rung& rung, std::vector<Section> v) {
    for (auto& s : v) add(rung, std::move(s));
  };

  Rung correctness{1, "small-model correctness", {}};
  add(correctness, boundary_masks(ctx));
  add(correctness, loss_normalization(ctx));
  add_all(correctness, parallel_parity(ctx));
  report.rungs.push_back(std::move(correctness));

  Rung cap{2, "capacity", {}};
  add_all(cap, capacity(ctx));
  report.rungs.push_back(std::move(cap));

  Rung recover{3, "save / recover", {}};
  add_all(recover, save_recover(ctx));
  report.rungs.push_back(std::move(recover));

  Rung cal{4, "calendar", {}};
  add_all(cal, calendar(ctx));
  report.rungs.push_back(std::move(cal));

  report.seconds = seconds_since(t0);
  write_report(report, out.string());
  if (con) {
    std::fprintf(con, "\n");
    for (const auto& r : report.rungs) std::fprintf(con, "rung %d  %-26s %s\n", r.number, r.name.c_str(), status_name(r.status()));
    std::fprintf(con, "acceptance %s in %.1f s; report: %s, %s\n", report.passed() ? "PASSED" : "FAILED",
                 report.seconds, (out / "report.md").c_str(), (out / "report.json").c_str());
    std::fflush(con);
  }
  return report;
}

}  // namespace troupe::acceptance
