#include "config/text_format.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "util/input_file.h"
#include "config/error.h"
#include "config/validate.h"

namespace troupe::config {
namespace {

namespace pb = google::protobuf;

struct FirstError : pb::io::ErrorCollector {
  std::optional<std::string> message;
  int line = 0, column = 0;  // 0-based, as protobuf reports them
  void AddError(int l, pb::io::ColumnNumber c, const std::string& m) override {
    if (message) return;
    message = m;
    line = l;
    column = c;
  }
  void AddWarning(int, pb::io::ColumnNumber, const std::string&) override {}
};

// The field path at a position of text-format input, found by a light scan of the
// tokens before it: the enclosing message fields and the last field name seen.
// Protobuf's own error knows the line but not the path.
struct Position {
  std::string scopes;   // "batch." for a field inside batch { }
  std::string field;    // the field whose value is being read ("" between fields)
  int field_line = -1;  // 0-based line of that field's name
  std::string last_field;   // the innermost scope's latest field, kept past its value
  int last_field_line = -1;
};

Position path_at(std::string_view text, int line, int column) {
  std::vector<std::string> scopes;
  std::string field;        // field of the innermost scope whose value comes next
  int field_line = -1;
  std::string last_field;   // latest field name of the innermost scope
  int last_field_line = -1;
  bool want_name = true;    // the next identifier is a field name (not a value)
  int list_depth = 0;       // inside [ ... ]
  int l = 0, c = 0;
  size_t i = 0;
  auto before_error = [&] { return l < line || (l == line && c < column); };
  auto advance = [&](size_t n) {
    for (size_t k = 0; k < n && i < text.size(); ++k, ++i) {
      if (text[i] == '\n') {
        ++l;
        c = 0;
      } else {
        ++c;
      }
    }
  };
  while (i < text.size() && before_error()) {
    const char ch = text[i];
    if (std::isspace(static_cast<unsigned char>(ch))) {
      advance(1);
    } else if (ch == '#') {
      while (i < text.size() && text[i] != '\n') advance(1);
    } else if (ch == '"' || ch == '\'') {
      advance(1);
      while (i < text.size() && text[i] != ch && text[i] != '\n')
        advance(text[i] == '\\' ? 2 : 1);
      advance(1);
      if (list_depth == 0) {
        want_name = true;
        field.clear();
      }
    } else if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' ||
               ch == '.' || ch == '+') {
      size_t j = i;
      while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) ||
                                 text[j] == '_' || text[j] == '-' || text[j] == '.' ||
                                 text[j] == '+'))
        ++j;
      std::string word(text.substr(i, j - i));
      advance(j - i);
      if (want_name && list_depth == 0) {
        field = last_field = word;
        field_line = last_field_line = l;
        want_name = false;
      } else if (list_depth == 0) {
        want_name = true;  // a scalar value ends the field
        field.clear();
      }
    } else if (ch == '{' || ch == '<') {
      scopes.push_back(field);
      field.clear();
      last_field.clear();
      want_name = true;
      advance(1);
    } else if (ch == '}' || ch == '>') {
      if (!scopes.empty()) scopes.pop_back();
      field.clear();
      last_field.clear();
      want_name = true;
      advance(1);
    } else if (ch == '[') {
      ++list_depth;
      advance(1);
    } else if (ch == ']') {
      if (list_depth > 0) --list_depth;
      want_name = list_depth == 0;
      if (want_name) field.clear();
      advance(1);
    } else {
      advance(1);  // ':' ',' ';'
    }
  }
  Position p;
  for (const auto& s : scopes) p.scopes += s + ".";
  p.field = field;
  p.field_line = field_line;
  p.last_field = last_field;
  p.last_field_line = last_field_line;
  return p;
}

// Protobuf names the offending field in some messages ('no field named "x"',
// 'for field "x"', 'Non-repeated field "x"'): prefer that name over the scan's.
std::optional<std::string> field_named_in(const std::string& message) {
  for (const char* key : {"no field named \"", "for field \"", "field \""}) {
    const auto at = message.find(key);
    if (at == std::string::npos) continue;
    const auto start = at + std::strlen(key);
    const auto end = message.find('"', start);
    if (end != std::string::npos) return message.substr(start, end - start);
  }
  return std::nullopt;
}

std::string describe(const std::string& message) {
  auto starts = [&](const char* p) { return message.rfind(p, 0) == 0; };
  if (message.find("has no field named") != std::string::npos)
    return "unknown field (" + message + ")";
  if (starts("Expected integer") || starts("Expected double") || starts("Expected string") ||
      starts("Expected bool") || message.find("out of range") != std::string::npos ||
      message.find("Invalid value") != std::string::npos ||
      message.find("Unknown enumeration value") != std::string::npos ||
      message.find("Couldn't parse") != std::string::npos)
    return "wrong type or value (" + message + ")";
  if (starts("Expected ") && message.size() >= 5 && message.compare(message.size() - 5, 5, "got: ") == 0)
    return "unexpected end of input (" + message + "); is a '}' missing?";
  if (starts("Expected ")) return "syntax error (" + message + ")";
  return message;
}

// Records the line of every field set in `m` (and below) from the parser's tree.
void record_lines(const pb::Message& m, const pb::TextFormat::ParseInfoTree& tree,
                  const std::string& prefix, const std::string& source, Origins& out) {
  const auto* refl = m.GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  refl->ListFields(m, &fields);
  for (const auto* f : fields) {
    const bool message = f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE;
    const int n = f->is_repeated() ? refl->FieldSize(m, f) : 1;
    for (int k = 0; k < n; ++k) {
      const int index = f->is_repeated() ? k : -1;
      const std::string path =
          prefix + f->name() + (f->is_repeated() ? fmt::format("[{}]", k) : std::string());
      const auto loc = tree.GetLocation(f, index);
      if (loc.line >= 0) out.set(path, fmt::format("{}:{}", source, loc.line + 1));
      if (!message) continue;
      const auto* nested = tree.GetTreeForNested(f, index);
      if (!nested) continue;
      const auto& sub = f->is_repeated() ? refl->GetRepeatedMessage(m, f, k) : refl->GetMessage(m, f);
      record_lines(sub, *nested, path + ".", source, out);
    }
  }
}

}  // namespace

ParsedConfig parse_config_text(std::string_view text, const std::string& source_name) {
  ParsedConfig out{Config(), Origins(source_name)};
  FirstError errors;
  pb::TextFormat::ParseInfoTree tree;
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(&tree);
  const bool ok = parser.ParseFromString(std::string(text), &out.config);
  if (!ok || errors.message) {
    const std::string msg = errors.message.value_or("cannot parse");
    const Position at = path_at(text, errors.line, errors.column);
    const auto named = field_named_in(msg);
    std::string path = at.scopes + named.value_or(at.field);
    if (!path.empty() && path.back() == '.') path.pop_back();
    // Protobuf reports some value errors (an unknown enum name) at the token after
    // the value, which may sit on a later line: use the line of the field itself.
    const int line =
        named && *named == at.last_field && at.last_field_line >= 0 ? at.last_field_line : errors.line;
    throw ConfigError(fmt::format("{}:{}: {}{}", source_name, line + 1,
                                  path.empty() ? std::string() : path + ": ", describe(msg)));
  }
  record_lines(out.config, tree, "", source_name, out.origins);
  return out;
}

std::string read_config_file(const std::string& path) {
  // A config is text of a few kilobytes: a directory, a FIFO or a device (/proc/self/mem)
  // named as one is refused before a byte is read, and so is a file past 16 MiB.
  try {
    return util::read_regular_file(path, "config file", size_t(16) << 20);
  } catch (const util::FileError& e) {
    throw ConfigError(e.what());
  }
}

Config load_config_text(std::string_view text, const std::string& source_name) {
  ParsedConfig p = parse_config_text(text, source_name);
  validate(p.config, p.origins);
  return p.config;
}

Config load_config_file(const std::string& path) {
  return load_config_text(read_config_file(path), path);
}

}  // namespace troupe::config
