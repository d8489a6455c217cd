#include "metrics/jsonl_log.h"

#include "metrics/error.h"
#include "metrics/json_records.h"

namespace troupe::metrics {

JsonlLog::JsonlLog(const std::string& path) : file_(path, AppendFile::Create::kAppend, /*line_oriented=*/true) {}

void JsonlLog::write(const Json& object, bool durable) {
  if (!object.is_object() || !object.contains("type"))
    throw MetricsError(path() + ": refusing to write a line that is not an object with a \"type\"");
  // dump() escapes control characters, so the line holds no raw newline; invalid
  // UTF-8 in strings (an exception text, say) is replaced rather than thrown on.
  std::string line = object.dump(-1, ' ', false, Json::error_handler_t::replace);
  line.push_back('\n');
  file_.append(line);
  if (durable) file_.sync();
}

void JsonlLog::startup(const StartupRecord& r) { write(to_json(r), true); }
void JsonlLog::step(const StepRecord& r) { write(to_json(r)); }
void JsonlLog::eval(const EvalRecord& r) { write(to_json(r)); }
void JsonlLog::failure(const FailureRecord& r) { write(to_json(r), true); }
void JsonlLog::summary(const RunSummary& r) { write(to_json(r), true); }

JsonlContents read_jsonl(const std::string& path) {
  const std::string text = read_file(path);
  JsonlContents out;
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos < text.size()) {
    ++line_no;
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) {
      out.unterminated_tail = true;
      break;
    }
    std::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) continue;
    Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
      throw MetricsError(path + ":" + std::to_string(line_no) + ": not valid JSON: " +
                         std::string(line.substr(0, 80)));
    if (!j.is_object())
      throw MetricsError(path + ":" + std::to_string(line_no) + ": expected a JSON object, got " +
                         std::string(line.substr(0, 80)));
    out.objects.push_back(std::move(j));
  }
  return out;
}

}  // namespace troupe::metrics
