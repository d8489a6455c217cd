// `supervisor inspect CKPT_DIR`: print a checkpoint's manifest and verify every
// shard; exit 1 naming the damage. `supervisor inspect RUN_DIR --placements`: the run's
// placement history (placement_history.h).
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <string>

#include "apps/supervisor/cli_args.h"
#include "apps/supervisor/placement_history.h"
#include "ckpt/inspect.h"

namespace troupe::cli {
namespace {

namespace po = boost::program_options;

const char* kUsage =
    "usage: supervisor inspect CKPT_DIR [--config] [--no-assemble]\n"
    "       supervisor inspect RUN_DIR --placements\n\n"
    "Prints a checkpoint's manifest (step, counters, LR-schedule position, data position,\n"
    "topology, config hash, RNG states), its shard files with sizes and CRC-32C, and its\n"
    "tensors; verifies every shard's size and checksum and assembles every tensor from\n"
    "its pieces (no holes, replicated copies bitwise equal). CKPT_DIR is a checkpoint\n"
    "directory (ROOT/step_NNNNNNNN) or a checkpoint root, whose `latest` is inspected.\n"
    "Exit status: 0 intact, 1 damaged or unreadable (each damage named on stderr), 2 usage.\n\n"
    "options:\n"
    "  --config       print the run config stored in the manifest\n"
    "  --no-assemble  verify checksums only, do not assemble tensors\n"
    "  --placements   RUN_DIR is a run directory: print which placement (physical\n"
    "                 data-parallel replicas) computed its steps: the start, each\n"
    "                 restart's and grow's (metrics.jsonl), each checkpoint's manifest\n"
    "  -h, --help     this text\n";

}  // namespace

int inspect_main(int argc, char** argv) {
  std::string dir;
  CommandLine cmd("inspect");
  cmd.options.add_options()
      ("dir", po::value<std::string>(&dir))
      ("config", "")
      ("no-assemble", "")
      ("placements", "")
      ("help,h", "");
  cmd.positional.add("dir", 1);
  if (const auto status = cmd.parse(argc, argv, kUsage)) return *status;
  if (dir.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (cmd.has("placements")) {
    print_placement_history(dir, std::cout);
    return 0;
  }
  ckpt::InspectOptions o;
  o.show_config = cmd.has("config");
  o.assemble = !cmd.has("no-assemble");
  return ckpt::inspect_checkpoint(dir, std::cout, std::cerr, o);
}

}  // namespace troupe::cli
