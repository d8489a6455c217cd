// One subcommand's command line, parsed the same way by every cmd_<name>.cpp: the
// options and positional names it registers, the values they hold afterwards, and the
// messages a user sees when the line is malformed or asks for --help.
#pragma once

#include <optional>
#include <string>

#include <boost/program_options.hpp>

namespace troupe::cli {

class CommandLine {
 public:
  // `name` as the user types it after `supervisor` ("inspect-update"): every message
  // starts "supervisor NAME: ". `caption` heads the options when they are printed.
  explicit CommandLine(std::string name, const std::string& caption = "");

  boost::program_options::options_description options;
  boost::program_options::positional_options_description positional;
  boost::program_options::variables_map vm;

  // prepare-data's shape: words that are no option are ignored (not refused), and a
  // malformed line is followed by a blank line and the help instead of "(see ...)".
  bool ignore_positional = false;
  bool error_shows_help = false;

  // Parses argv (argv[0] is the command's name). Returns the exit status when the
  // command ends here, nullopt to go on: 0 after --help, `help` printed on stdout
  // (before required options are checked); 2 after a malformed line, with
  // "supervisor NAME: WHAT (see supervisor NAME --help)" on stderr.
  std::optional<int> parse(int argc, char** argv, const std::string& help);

  // Whether the option was given (or has a default).
  bool has(const char* option) const { return vm.count(option) > 0; }

  // "supervisor NAME: MESSAGE" (MESSAGE ends without a newline) on stderr; returns 2,
  // the exit status of a usage error.
  int usage_error(const std::string& message) const;

 private:
  std::string name_;
};

}  // namespace troupe::cli
