// `supervisor run`: train with the actor runtime.
#include <cstdio>
#include <string>

#include <boost/program_options.hpp>
#include <google/protobuf/text_format.h>

#include "actors/runtime.h"
#include "apps/supervisor/config_args.h"

namespace troupe::cli {
namespace {

namespace po = boost::program_options;

const char* kUsage =
    "usage: supervisor run [CONFIG] [--set PATH=VALUE]... [--megatron-args FILE] [--quiet]\n\n"
    "Trains the model CONFIG describes (the embedded default without one) with the actor\n"
    "runtime: data loaders, pipeline stages, optimizer shards and a coordinator under a\n"
    "supervisor, in this process. Prints a startup block, one line per step and a summary;\n"
    "writes metrics.jsonl and TensorBoard events into logging.run_dir. Ctrl-C (SIGINT) or\n"
    "SIGTERM stops after the current step (exit 130 / 143).\n\n"
    "options:\n";

const char* kRunOptions =
    "  --quiet                  no step lines or summary on stdout (files are still written)\n"
    "  -h, --help               this text\n";

}  // namespace

int run_main(int argc, char** argv) {
  ConfigArgs config_args;
  po::options_description options;
  po::positional_options_description positional;
  add_config_options(options, positional, config_args);
  options.add_options()("quiet", "")("help,h", "");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(options).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "supervisor run: %s (see supervisor run --help)\n", e.what());
    return 2;
  }
  if (vm.count("help")) {
    std::printf("%s%s%s", kUsage, config_options_help(), kRunOptions);
    return 0;
  }
  const LoadedConfig loaded = load_config(config_args);
  actors::RunOptions run;
  run.console = !vm.count("quiet");
  run.config_source = loaded.describe();
  google::protobuf::TextFormat::PrintToString(loaded.config, &run.config_text);
  const auto result = actors::run_training(loaded.config, run);
  if (result.failure) {
    std::fprintf(stderr, "supervisor run: training failed: %s\n", result.failure->summary.c_str());
    for (const auto& f : result.failure->failures)
      std::fprintf(stderr, "  %.3f s  %s: %s\n", f.seconds_since_start, f.path.c_str(), f.reason.c_str());
  } else if (result.outcome.status == "failed") {
    std::fprintf(stderr, "supervisor run: training failed: %s\n", result.outcome.error.c_str());
  } else if (result.outcome.status == "interrupted") {
    std::fprintf(stderr, "supervisor run: interrupted (%s) after step %lld; metrics flushed\n",
                 result.outcome.error.c_str(), static_cast<long long>(result.outcome.summary.steps));
  }
  return result.exit_code();
}

}  // namespace troupe::cli
