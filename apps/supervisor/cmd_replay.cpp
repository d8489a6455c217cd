// `supervisor replay RUN_DIR --step N`: a run's steps recomputed from one of its
// checkpoints and compared bit for bit with metrics.jsonl, or rerun under a
// counterfactual change beside the recorded ones (replay/replay.h; docs/metrics.md,
// "Replay").
#include <boost/program_options.hpp>
#include <cstdio>
#include <algorithm>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "replay/replay.h"
#include "apps/supervisor/cli_args.h"

namespace troupe::cli {
namespace {

namespace po = boost::program_options;

const char* kUsage =
    "usage: supervisor replay RUN_DIR --step N [--from STEP] [--out DIR] [--dump]\n"
    "                         [--skip-samples IDS] [--skip-documents IDS] [--lr-scale F]\n"
    "                         [--clip F] [--set PATH=VALUE]... [--physical-replicas P]\n\n"
    "Recomputes the steps of the run in RUN_DIR up to step N, from the newest complete\n"
    "checkpoint before N (or the one of step --from; 0: the initial weights), with the\n"
    "run's saved config (RUN_DIR/config.textproto) and data, in a scratch run directory\n"
    "(--out, default RUN_DIR/replay/run_FROM_N, changed_FROM_N with a change; the run's\n"
    "own files are never written).\n"
    "Each step's consumed samples, sample IDs, loss tokens, gradient norm, loss and LR\n"
    "are compared bit for bit with metrics.jsonl; the first difference is reported with\n"
    "its step and quantity (non-determinism, or a silent data corruption).\n\n"
    "With a change, the same steps are rerun under it and printed beside the recorded\n"
    "ones (loss and gradient norm per step): whether a spike came from the data or from\n"
    "the optimizer settings.\n"
    "Exit status: 0 bitwise equal (or the counterfactual printed), 1 a difference or a\n"
    "failure, 2 usage.\n\n"
    "options:\n"
    "  --step N            the last step recomputed (required)\n"
    "  --from STEP         start from the checkpoint of this step (< N)\n"
    "  --out DIR           the scratch run directory (replaced if an earlier replay's)\n"
    "  --dump              also write step N's documents (token IDs, text with the byte\n"
    "                      tokenizer), each with its loss sum, token count and mean, to\n"
    "                      RUN_DIR/replay/step_N/ (documents.jsonl, summary.json), and\n"
    "                      print the top documents by mean loss; not with a change\n"
    "  --skip-samples IDS  comma-separated train sample IDs added to data.skip_samples\n"
    "  --skip-documents IDS  comma-separated train documents (sequence indices of the\n"
    "                      dataset's .idx): every sample reading one of them is skipped\n"
    "  --lr-scale F        optimizer.lr and optimizer.min_lr times F\n"
    "  --clip F            optimizer.clip_grad = F\n"
    "  --set PATH=VALUE    any config field, as for supervisor run (repeatable)\n"
    "  --physical-replicas P  the placement to recompute on (parallel.physical_replicas;\n"
    "                      not a change: the numbers depend on the logical layout alone).\n"
    "                      Default: every logical replica on one physical replica where\n"
    "                      the run allows it (distributed optimizer, CPU), else the run's\n"
    "                      placement; 0: the run's placement\n"
    "  -h, --help          this text\n";

// "16,17,203" -> {16, 17, 203}; nullopt on anything else.
std::optional<std::vector<int64_t>> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string part = text.substr(start, end - start);
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos || part.size() > 18)
      return std::nullopt;
    ids.push_back(std::stoll(part));
    start = end + 1;
  }
  return ids;
}

}  // namespace

int replay_main(int argc, char** argv) {
  replay::ReplayOptions o;
  int64_t from = -1;
  std::string skip_samples, skip_documents;
  double clip = -1;
  CommandLine cmd("replay");
  cmd.options.add_options()
      ("run", po::value<std::string>(&o.run_dir))
      ("step", po::value<int64_t>(&o.step))
      ("from", po::value<int64_t>(&from))
      ("out", po::value<std::string>(&o.out_dir))
      ("skip-samples", po::value<std::string>(&skip_samples))
      ("skip-documents", po::value<std::string>(&skip_documents))
      ("lr-scale", po::value<double>(&o.lr_scale))
      ("clip", po::value<double>(&clip))
      ("set", po::value<std::vector<std::string>>(&o.sets))
      ("dump", po::bool_switch(&o.dump))
      ("physical-replicas", po::value<int>(&o.physical_replicas))
      ("help,h", "");
  cmd.positional.add("run", 1);
  if (const auto status = cmd.parse(argc, argv, kUsage)) return *status;
  if (o.run_dir.empty()) return cmd.usage_error("no RUN_DIR given (see supervisor replay --help)");
  if (!cmd.has("step")) return cmd.usage_error("--step N is required (see supervisor replay --help)");
  if (o.step < 1) return cmd.usage_error("--step must be at least 1, got " + std::to_string(o.step));
  if (cmd.has("from")) {
    if (from < 0 || from >= o.step)
      return cmd.usage_error("--from " + std::to_string(from) + " must be in [0, --step " + std::to_string(o.step) +
                             ")");
    o.from = from;
  }
  if (cmd.has("skip-samples")) {
    const auto ids = parse_ids(skip_samples);
    if (!ids) return cmd.usage_error("--skip-samples: '" + skip_samples + "' is not a comma-separated list of sample IDs");
    o.skip_samples = *ids;
  }
  if (cmd.has("skip-documents")) {
    const auto ids = parse_ids(skip_documents);
    if (!ids)
      return cmd.usage_error("--skip-documents: '" + skip_documents + "' is not a comma-separated list of documents");
    o.skip_documents = *ids;
  }
  if (cmd.has("physical-replicas") && o.physical_replicas < 0)
    return cmd.usage_error("--physical-replicas must be 0 (the run's placement) or more, got " +
                           std::to_string(o.physical_replicas));
  if (cmd.has("lr-scale") && !(o.lr_scale > 0))
    return cmd.usage_error("--lr-scale must be positive, got " + std::to_string(o.lr_scale));
  if (cmd.has("clip")) {
    if (!(clip >= 0)) return cmd.usage_error("--clip must be non-negative, got " + std::to_string(clip));
    o.clip = clip;
  }

  try {
    const auto r = replay::replay_run(o);
    std::fputs(replay::format_replay(r).c_str(), stdout);
    return r.first_difference ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "supervisor replay: %s\n", e.what());
    return 1;
  }
}

}  // namespace troupe::cli
