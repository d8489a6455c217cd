// metrics.jsonl: one JSON object per line, appended as it happens. Each line goes to
// the kernel in one write(2) before the call returns, so a crash of the process
// loses at most the line being written; startup, failure and summary lines are also
// fdatasync'ed. Reopening a file (a resumed run) keeps its lines and cuts off an
// unterminated last line a crash left behind.
#pragma once

#include <string>
#include <vector>

#include "metrics/json.h"

#include "metrics/files.h"
#include "metrics/step_record.h"

namespace troupe::metrics {

class JsonlLog {
 public:
  explicit JsonlLog(const std::string& path);

  void startup(const StartupRecord& r);
  void step(const StepRecord& r);
  void eval(const EvalRecord& r);
  void failure(const FailureRecord& r);
  void summary(const RunSummary& r);
  // Any other object (it must be a JSON object with a "type").
  void write(const Json& object, bool durable = false);

  const std::string& path() const { return file_.path(); }
  // Bytes of an unfinished line removed when the file was reopened.
  int64_t repaired_bytes() const { return file_.repaired_bytes(); }

 private:
  AppendFile file_;
};

// The objects of a JSON-lines file, in order. An unterminated last line (a crash
// while writing it) is left out and reported in `unterminated_tail`; any other line
// that is not a JSON object throws MetricsError naming the file and line number.
struct JsonlContents {
  std::vector<Json> objects;
  bool unterminated_tail = false;
};
JsonlContents read_jsonl(const std::string& path);

}  // namespace troupe::metrics
