#include "config/override.h"

#include <optional>
#include <string>
#include <vector>

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>

#include <fmt/format.h>

#include "config/error.h"

namespace troupe::config {
namespace {

namespace pb = google::protobuf;

struct FirstError : pb::io::ErrorCollector {
  std::string message;
  void AddError(int, pb::io::ColumnNumber, const std::string& m) override {
    if (message.empty()) message = m;
  }
};

std::string quoted(std::string_view v) {
  std::string out = "\"";
  for (char ch : v) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

// The value tokens of `text` as text format reads them (a leading '-' is a token of
// its own), or nullopt when the reader would skip part of it: a '#' comment.
std::optional<std::vector<std::string>> value_tokens(const std::string& text) {
  pb::io::ArrayInputStream in(text.data(), int(text.size()));
  FirstError errors;
  pb::io::Tokenizer tokenizer(&in, &errors);
  tokenizer.set_comment_style(pb::io::Tokenizer::SH_COMMENT_STYLE);
  tokenizer.set_report_newlines(true);
  std::string read;
  std::vector<std::string> tokens;
  while (tokenizer.Next()) {
    const auto& t = tokenizer.current();
    read += t.text;
    if (t.type != pb::io::Tokenizer::TYPE_WHITESPACE && t.type != pb::io::Tokenizer::TYPE_NEWLINE)
      tokens.push_back(t.text);
  }
  if (read != text) return std::nullopt;
  return tokens;
}

// Why `text` is not exactly one value (a signed number counts as one), or nullopt.
std::optional<std::string> single_value_problem(const std::string& text) {
  const auto tokens = value_tokens(text);
  if (!tokens) return "a --set value takes no comment ('#')";
  const bool signed_value = tokens->size() == 2 && (*tokens)[0] == "-";
  if (tokens->size() != 1 && !signed_value) return "a --set value is one value";
  return std::nullopt;
}

// Replaces the repeated scalar `field` of `msg` by the list `value` ("[a, b]", text
// format), parsed into a scratch message so nothing else can come in with it.
template <class Fail>
void set_list(pb::Message& msg, const pb::FieldDescriptor& field, const std::string& value, Fail fail) {
  if (!value_tokens(value)) throw fail("a --set value takes no comment ('#')");
  std::unique_ptr<pb::Message> scratch(msg.New());
  FirstError errors;
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(field.name() + ": " + value, scratch.get()) || !errors.message.empty())
    throw fail(fmt::format("wrong type or value ({})", errors.message.empty() ? "cannot parse" : errors.message));
  std::vector<const pb::FieldDescriptor*> set;
  scratch->GetReflection()->ListFields(*scratch, &set);
  if (set.size() > 1 || (set.size() == 1 && set[0] != &field))
    throw fail(fmt::format("\"{}\" is not a single list", value));
  msg.GetReflection()->ClearField(&msg, &field);
  msg.MergeFrom(*scratch);  // the field is empty now: MergeFrom puts the list in
}

}  // namespace

void apply_override(Config& cfg, std::string_view assignment, Origins* origins) {
  const std::string where = fmt::format("--set {}", assignment);
  const auto eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0)
    throw ConfigError(where + ": expected field.path=value");
  const std::string path(assignment.substr(0, eq));
  const std::string value(assignment.substr(eq + 1));
  auto fail = [&](const std::string& field, const std::string& what) {
    return ConfigError(fmt::format("{}: {}: {}", where, field, what));
  };

  pb::Message* msg = &cfg;
  std::string walked;  // the canonical path so far, with indices
  size_t start = 0;
  while (true) {
    const auto dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    const bool last = dot == std::string::npos;
    int index = -1;
    if (const auto br = part.find('['); br != std::string::npos) {
      if (part.back() != ']') throw fail(path, "malformed index, expected name[N]");
      const std::string digits = part.substr(br + 1, part.size() - br - 2);
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos ||
          digits.size() > 6)
        throw fail(path, fmt::format("index \"{}\" is not a non-negative integer", digits));
      index = std::stoi(digits);
      part.resize(br);
    }
    const auto* desc = msg->GetDescriptor();
    const auto* field = desc->FindFieldByName(part);
    const std::string here = walked + (walked.empty() ? "" : ".") + part;
    if (!field)
      throw fail(here, fmt::format("unknown field ({} has no field named \"{}\")",
                                   desc->name(), part));
    const bool is_message = field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE;
    // A repeated scalar field is set whole, as a list: name=[v1, v2] (name=[] empties it).
    if (last && field->is_repeated() && !is_message) {
      if (index >= 0 || value.size() < 2 || value.front() != '[' || value.back() != ']')
        throw fail(here, fmt::format("is a list: give it whole, e.g. {}=[1, 2] ({}=[] empties it)", here, here));
      set_list(*msg, *field, value, [&](const std::string& what) { return fail(here, what); });
      if (origins) origins->set(here, where);
      return;
    }
    if (field->is_repeated() != (index >= 0))
      throw fail(here, field->is_repeated()
                           ? fmt::format("is repeated: give an index, e.g. {}[0]", part)
                           : std::string("is not repeated: remove the index"));
    const auto* refl = msg->GetReflection();
    if (!last) {
      if (!is_message) throw fail(here, "is not a message, so it has no fields below it");
      if (index >= 0) {
        const int size = refl->FieldSize(*msg, field);
        if (index > size)
          throw fail(here, fmt::format("index {} skips entries: there are {} (use {} to append)",
                                       index, size, size));
        msg = index == size ? refl->AddMessage(msg, field)
                            : refl->MutableRepeatedMessage(msg, field, index);
        walked = fmt::format("{}[{}]", here, index);
      } else {
        msg = refl->MutableMessage(msg, field);
        walked = here;
      }
      start = dot + 1;
      continue;
    }
    if (is_message) throw fail(here, "is a message: set one of its fields (name.field=value)");
    // Parse "name: value" as text format into a scratch message of the same type,
    // then copy just that field, so the value cannot smuggle in other fields.
    std::string text_value = value;
    if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_STRING &&
        !(value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
          value.back() == value.front()))
      text_value = quoted(value);
    std::unique_ptr<pb::Message> scratch(msg->New());
    FirstError errors;
    pb::TextFormat::Parser parser;
    parser.RecordErrorsTo(&errors);
    const std::string text = part + ": " + text_value;
    if (value.empty() && field->cpp_type() != pb::FieldDescriptor::CPPTYPE_STRING)
      throw fail(here, "missing value after '='");
    if (!parser.ParseFromString(text, scratch.get()) || !errors.message.empty())
      throw fail(here, fmt::format("wrong type or value ({})",
                                   errors.message.empty() ? "cannot parse" : errors.message));
    std::vector<const pb::FieldDescriptor*> set;
    scratch->GetReflection()->ListFields(*scratch, &set);
    if (set.size() != 1 || set[0] != field)
      throw fail(here, fmt::format("\"{}\" is not a single value", value));
    if (auto why = single_value_problem(text_value))
      throw fail(here, fmt::format("\"{}\" is not a single value: {}", value, *why));
    msg->MergeFrom(*scratch);  // singular scalar: MergeFrom overwrites it
    if (origins) origins->set(here, where);
    return;
  }
}

}  // namespace troupe::config
