// `supervisor inspect`: print a checkpoint's manifest readably and verify it.
#pragma once

#include <ostream>
#include <string>

namespace troupe::ckpt {

struct InspectOptions {
  bool show_config = false;  // print the config text too
  bool assemble = true;      // assemble every tensor: coverage and replica equality
};

// `path` is a checkpoint directory (holds manifest.pb) or a root: then the
// checkpoint ROOT/latest names is inspected (no fallback: inspection looks at
// what a resume would try first). Prints to `out`; names each damage on `err`.
// Returns 0 when the checkpoint is intact, 1 when anything is damaged or unreadable.
int inspect_checkpoint(const std::string& path, std::ostream& out, std::ostream& err,
                       const InspectOptions& options = {});

}  // namespace troupe::ckpt
