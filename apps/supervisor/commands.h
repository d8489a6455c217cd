// The subcommands of `supervisor`. Each lives in its own cmd_<name>.cpp and
// receives the arguments after its name (argv[0] is "supervisor <name>").
// Return value is the process exit status.
#pragma once

namespace troupe::cli {

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

}  // namespace troupe::cli
