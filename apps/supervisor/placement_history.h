// `supervisor inspect RUN_DIR --placements`: which placement computed which steps of a
// run (docs/layout.md, docs/cluster.md). The placement it started on (its
// config.textproto), each change metrics.jsonl records (a restart's `recovery` line
// names the placement the group came back on, smaller after a shrink; a `grow` line
// the larger one it went back to), and the placement each checkpoint's manifest records.
#pragma once

#include <ostream>
#include <string>

namespace troupe::cli {

// Prints the history of the run in `run_dir` to `out`. Throws std::invalid_argument
// naming the file when RUN_DIR is not a run directory, and what the files' readers
// throw (config::ConfigError, metrics::MetricsError) when one is damaged; a checkpoint
// whose manifest does not read is printed as such.
void print_placement_history(const std::string& run_dir, std::ostream& out);

}  // namespace troupe::cli
