#include "apps/supervisor/cli_args.h"

#include <cstdio>
#include <utility>

namespace troupe::cli {

namespace po = boost::program_options;

CommandLine::CommandLine(std::string name, const std::string& caption) : options(caption), name_(std::move(name)) {}

std::optional<int> CommandLine::parse(int argc, char** argv, const std::string& help) {
  try {
    po::command_line_parser parser(argc, argv);
    parser.options(options);
    if (!ignore_positional) parser.positional(positional);
    po::store(parser.run(), vm);
    if (has("help")) {
      std::fputs(help.c_str(), stdout);
      return 0;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    if (error_shows_help)
      std::fprintf(stderr, "supervisor %s: %s\n\n%s", name_.c_str(), e.what(), help.c_str());
    else
      std::fprintf(stderr, "supervisor %s: %s (see supervisor %s --help)\n", name_.c_str(), e.what(), name_.c_str());
    return 2;
  }
  return std::nullopt;
}

int CommandLine::usage_error(const std::string& message) const {
  std::fprintf(stderr, "supervisor %s: %s\n", name_.c_str(), message.c_str());
  return 2;
}

}  // namespace troupe::cli
