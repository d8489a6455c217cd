#include "data/corpus_reader.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "data/compressed_input.h"
#include "data/parquet_input.h"
#include "data/error.h"
#include "data/mapped_file.h"

namespace troupe::data {
namespace {

bool blank(std::string_view s) {
  for (char c : s) {
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n' && c != '\f' && c != '\v') return false;
  }
  return true;
}

// Line [begin, end) without its '\n'; next is the offset after the '\n'.
struct Line {
  std::string_view text;
  size_t begin;
  size_t next;
};

Line line_at(std::string_view s, size_t pos) {
  const size_t nl = s.find('\n', pos);
  const size_t end = nl == std::string_view::npos ? s.size() : nl;
  return {s.substr(pos, end - pos), pos, nl == std::string_view::npos ? s.size() : nl + 1};
}

bool percent_line(std::string_view line) { return line == "%" || line == "%\r"; }

bool ends_with(const std::string& s, const char* suffix) {
  const std::string_view x(suffix);
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

// Length of the valid UTF-8 sequence at s[i], or 0 when none starts there
// (overlong forms, surrogates and code points past U+10FFFF are invalid).
size_t utf8_sequence(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return n;
}

// Bytes of `s` that begin no valid UTF-8 sequence and lie inside none.
size_t invalid_utf8_bytes(std::string_view s) {
  size_t invalid = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence(s, i);
    invalid += n == 0;
    i += n == 0 ? 1 : n;
  }
  return invalid;
}

// Calls on_bytes in coarse steps so progress callbacks stay cheap.
class ByteReporter {
 public:
  explicit ByteReporter(const std::function<void(size_t)>& f) : f_(f) {}
  void at(size_t pos) {
    if (f_ && pos - reported_ >= (size_t(1) << 20)) flush(pos);
  }
  void flush(size_t pos) {
    if (f_ && pos > reported_) f_(pos - reported_);
    reported_ = pos;
  }

 private:
  const std::function<void(size_t)>& f_;
  size_t reported_ = 0;
};

// One line of a JSON-lines file: its "text" string to `emit` (a blank line skipped).
// `offset` is where the line starts, in the file or, for a compressed one, in its
// decompressed text (`offset_name` says which).
void jsonl_line(std::string_view text, const std::string& path, int64_t line_no, size_t offset,
                const char* offset_name, const std::function<void(std::string_view)>& emit) {
  if (blank(text)) return;
  const std::string where = path + ":" + std::to_string(line_no);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw DataError(where + ": invalid JSON at column " + std::to_string(e.byte) + " (" + offset_name + " " +
                    std::to_string(offset + (e.byte > 0 ? e.byte - 1 : 0)) + ")");
  }
  const auto it = j.is_object() ? j.find("text") : j.end();
  if (!j.is_object() || it == j.end())
    throw DataError(where + ": no \"text\" field (" + offset_name + " " + std::to_string(offset) + ")");
  if (!it->is_string())
    throw DataError(where + ": \"text\" is not a string (" + offset_name + " " + std::to_string(offset) + ")");
  emit(it->get_ref<const std::string&>());
}

bool jsonl_name(const std::string& path) {
  return ends_with(path, ".jsonl") || ends_with(path, ".ndjson") || ends_with(path, ".json");
}

// `path` without a compression suffix (.gz, .zst, .zstd).
std::string without_compression_suffix(const std::string& path) {
  for (const char* suffix : {".gz", ".zst", ".zstd"})
    if (ends_with(path, suffix)) return path.substr(0, path.size() - std::string_view(suffix).size());
  return path;
}

}  // namespace

InputFormat parse_input_format(const std::string& name) {
  if (name == "auto") return InputFormat::Auto;
  if (name == "text") return InputFormat::Text;
  if (name == "blank-lines") return InputFormat::BlankLines;
  if (name == "jsonl") return InputFormat::Jsonl;
  if (name == "fortune") return InputFormat::Fortune;
  if (name == "parquet") return InputFormat::Parquet;
  throw DataError("unknown input format '" + name + "' (expected auto, text, blank-lines, jsonl, fortune or parquet)");
}

const char* input_format_name(InputFormat f) {
  switch (f) {
    case InputFormat::Auto: return "auto";
    case InputFormat::Text: return "text";
    case InputFormat::BlankLines: return "blank-lines";
    case InputFormat::Jsonl: return "jsonl";
    case InputFormat::Fortune: return "fortune";
    case InputFormat::Parquet: return "parquet";
  }
  return "?";
}

std::optional<std::string> not_text(std::string_view s) {
  if (const size_t nul = s.find('\0'); nul != std::string_view::npos)
    return fmt::format("a NUL byte at offset {}", nul);
  const size_t invalid = invalid_utf8_bytes(s);
  if (invalid * 100 > s.size())
    return fmt::format("{} of {} bytes ({:.1f}%) are not UTF-8, more than 1%", invalid, s.size(),
                       100.0 * double(invalid) / double(s.size()));
  return std::nullopt;
}

InputFormat detect_format(const std::string& path, std::string_view s, InputFormat requested) {
  if (requested != InputFormat::Auto) return requested;
  if (jsonl_name(path)) return InputFormat::Jsonl;
  for (size_t pos = 0; pos < s.size();) {
    const Line l = line_at(s, pos);
    if (percent_line(l.text)) return InputFormat::Fortune;
    pos = l.next;
  }
  return InputFormat::Text;
}

std::vector<FileRange> jsonl_pieces(const std::string& path, InputFormat format, size_t piece_bytes) {
  const util::MappedFile file = map_input_file(path, "corpus file");
  const std::string_view s(reinterpret_cast<const char*>(file.data()), file.size());
  std::vector<FileRange> out;
  if (piece_bytes == 0 || s.size() < 2 * piece_bytes) return out;
  if (s.substr(0, 4) == "PAR1" || compression_of(s) != Compression::None) return out;
  if (!(format == InputFormat::Jsonl || (format == InputFormat::Auto && jsonl_name(path)))) return out;
  // Auto skips a file that is not text whole: read_documents says why, on the whole file.
  if (format == InputFormat::Auto && not_text(s)) return out;
  int64_t line = 1;
  for (size_t begin = 0; begin < s.size();) {
    size_t end = begin + piece_bytes >= s.size() ? s.size() : s.find('\n', begin + piece_bytes);
    end = end == std::string_view::npos || end >= s.size() ? s.size() : end + 1;
    out.push_back({begin, end, line});
    line += int64_t(std::count(s.begin() + long(begin), s.begin() + long(end), '\n'));
    begin = end;
  }
  return out;
}

ReadStats read_documents(const std::string& path, InputFormat format,
                         const std::function<void(std::string_view)>& on_document,
                         const std::function<void(size_t)>& on_bytes, const std::string& parquet_column,
                         const FileRange* range) {
  const util::MappedFile file = map_input_file(path, "corpus file");
  const std::string_view s(reinterpret_cast<const char*>(file.data()), file.size());
  ReadStats stats;
  ByteReporter progress(on_bytes);
  const std::function<void(std::string_view)> emit = [&](std::string_view doc) {
    if (blank(doc)) {
      ++stats.skipped_empty;
      return;
    }
    ++stats.documents;
    on_document(doc);
  };
  if (range) {
    // A piece of an uncompressed JSON-lines file (jsonl_pieces): its lines only.
    if (range->begin > range->end || range->end > s.size())
      throw DataError(path + ": the piece [" + std::to_string(range->begin) + ", " + std::to_string(range->end) +
                      ") is outside the file's " + std::to_string(s.size()) + " bytes (did it change?)");
    int64_t line_no = range->first_line;
    for (size_t pos = range->begin; pos < range->end;) {
      const Line l = line_at(s.substr(0, range->end), pos);
      pos = l.next;
      jsonl_line(l.text, path, line_no++, l.begin, "file offset", emit);
      progress.at(l.next - range->begin);
    }
    progress.flush(range->end - range->begin);
    return stats;
  }
  // Parquet (the "PAR1" magic): its string column through pyarrow (data/parquet_input.h).
  const bool parquet = s.substr(0, 4) == "PAR1";
  if (format == InputFormat::Parquet && !parquet)
    throw DataError(path + ": not a Parquet file (no PAR1 magic at its start)");
  if (parquet) {
    if (format != InputFormat::Auto && format != InputFormat::Parquet)
      throw DataError(path + ": a Parquet file is read as Parquet only, not as " + input_format_name(format));
    read_parquet_documents(path, parquet_column, emit);
    progress.flush(s.size());
    return stats;
  }
  // gzip and zstd: JSON lines, decompressed as they are read (data/compressed_input.h).
  if (const Compression c = compression_of(s); c != Compression::None) {
    const std::string kind = compression_name(c);
    if (format != InputFormat::Auto && format != InputFormat::Jsonl)
      throw DataError(path + ": a " + kind + " file is read as JSON lines only, not as " + input_format_name(format));
    if (format == InputFormat::Auto && !jsonl_name(without_compression_suffix(path)))
      throw DataError(path + ": a " + kind + " file is read as JSON lines: name it .jsonl.gz or .jsonl.zst (or "
                      ".ndjson, .json before the suffix), or pass --format jsonl");
    std::string carry;  // a line split between two decompressed pieces
    int64_t line_no = 0;
    size_t offset = 0;  // where the next line starts in the decompressed text
    auto line = [&](std::string_view text) {
      jsonl_line(text, path, ++line_no, offset, "decompressed offset", emit);
      offset += text.size() + 1;
    };
    // A JSON error inside may be damage the decompressor finds only later (a gzip
    // member's CRC is at its end): the rest is decompressed without reading it, and
    // the decompressor's error, when there is one, is the one reported.
    std::optional<DataError> text_error;
    auto pieces = [&](std::string_view piece) {
      if (text_error) return;
      try {
        for (size_t start = 0;;) {
          const size_t nl = piece.find('\n', start);
          if (nl == std::string_view::npos) {
            carry.append(piece.substr(start));
            return;
          }
          if (carry.empty()) {
            line(piece.substr(start, nl - start));
          } else {
            carry.append(piece.substr(start, nl - start));
            line(carry);
            carry.clear();
          }
          start = nl + 1;
        }
      } catch (const DataError& e) {
        text_error = e;
      }
    };
    try {
      decompress(path, s, c, pieces, [&](size_t consumed) { progress.at(consumed); });
    } catch (const DataError& e) {
      if (!text_error) throw;
      throw DataError(std::string(e.what()) + " (the text read wrong before: " + text_error->what() + ")");
    }
    if (text_error) throw *text_error;
    if (!carry.empty()) line(carry);
    progress.flush(s.size());
    return stats;
  }
  if (format == InputFormat::Auto && (stats.not_text = not_text(s))) {
    progress.flush(s.size());
    return stats;
  }
  format = detect_format(path, s, format);

  switch (format) {
    case InputFormat::Auto:
    case InputFormat::Text:
      emit(s);
      break;

    case InputFormat::Fortune: {
      size_t doc_begin = 0;
      for (size_t pos = 0; pos < s.size();) {
        const Line l = line_at(s, pos);
        if (percent_line(l.text)) {
          emit(s.substr(doc_begin, l.begin - doc_begin));
          doc_begin = l.next;
          progress.at(l.next);
        }
        pos = l.next;
      }
      if (doc_begin < s.size()) emit(s.substr(doc_begin));
      break;
    }

    case InputFormat::BlankLines: {
      size_t doc_begin = 0;
      bool in_doc = false;
      for (size_t pos = 0; pos < s.size();) {
        const Line l = line_at(s, pos);
        if (blank(l.text)) {
          if (in_doc) emit(s.substr(doc_begin, l.begin - doc_begin));
          in_doc = false;
          progress.at(l.next);
        } else if (!in_doc) {
          in_doc = true;
          doc_begin = l.begin;
        }
        pos = l.next;
      }
      if (in_doc) emit(s.substr(doc_begin));
      break;
    }

    case InputFormat::Jsonl: {
      int64_t line_no = 0;
      for (size_t pos = 0; pos < s.size();) {
        const Line l = line_at(s, pos);
        pos = l.next;
        jsonl_line(l.text, path, ++line_no, l.begin, "file offset", emit);
        progress.at(l.next);
      }
      break;
    }

    case InputFormat::Parquet:  // read above: a file without the magic is refused there
      break;
  }
  progress.flush(s.size());
  return stats;
}

}  // namespace troupe::data
