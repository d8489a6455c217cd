// Documents out of raw corpus files. Files are memory-mapped; documents are
// handed to the callback one at a time, so inputs larger than memory stream.
//
// Formats:
//   text         the whole file is one document
//   blank-lines  documents separated by one or more blank lines (empty or only
//                spaces, tabs, '\r'); a document keeps its lines' newlines
//   jsonl        one JSON object per line; its "text" string is the document
//                (blank lines are skipped)
//   fortune      fortune-cookie files: entries separated by lines holding only '%'
//   auto         .jsonl/.ndjson/.json -> jsonl; a file with a line holding only '%'
//                -> fortune; anything else -> text. A file that is not text
//                (not_text below) is skipped whole and reported, never read as documents.
// Parquet (told by its "PAR1" magic under auto, or parquet): the string column
// `parquet_column` ("text" by default), one document a row, read by pyarrow in a python3
// child (data/parquet_input.h); under text, blank-lines, jsonl or fortune it is refused.
// Compressed (gzip or zstd, told by the first bytes: data/compressed_input.h): JSON
// lines only, decompressed as they are read; auto takes a name ending .jsonl.gz,
// .jsonl.zst (or .ndjson / .json before the suffix), anything else is refused with the
// reason, as is a compressed file under text, blank-lines or fortune. Progress counts
// compressed bytes; JSON errors name the offset in the decompressed text.
// Documents that are empty or only whitespace are skipped and counted.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::data {

enum class InputFormat { Auto, Text, BlankLines, Jsonl, Fortune, Parquet };

InputFormat parse_input_format(const std::string& name);  // throws DataError
const char* input_format_name(InputFormat f);

// Why `bytes` are not text, or nullopt when they are: a NUL byte anywhere, or more
// than 1% of the bytes outside valid UTF-8 sequences (strfile's .dat indexes, images,
// archives). Text in a legacy 8-bit encoding with a few accented letters still passes.
std::optional<std::string> not_text(std::string_view bytes);

// The concrete format of `path` for `requested` (resolves Auto).
InputFormat detect_format(const std::string& path, std::string_view contents, InputFormat requested);

struct ReadStats {
  int64_t documents = 0;  // handed to the callback
  int64_t skipped_empty = 0;
  std::optional<std::string> not_text;  // format Auto only: why the file was skipped whole
};

// A piece of an uncompressed JSON-lines file: bytes [begin, end), from the start of a
// line to just after a '\n' (or the file's end); first_line is its first line's number.
struct FileRange {
  size_t begin = 0;
  size_t end = 0;
  int64_t first_line = 1;
};

// The pieces of about `piece_bytes` to read `path` in on several threads, in order and
// covering it: for an uncompressed text file read as JSON lines (format jsonl, or auto on
// a .jsonl/.ndjson/.json name) of at least two pieces; empty otherwise (read it whole).
std::vector<FileRange> jsonl_pieces(const std::string& path, InputFormat format, size_t piece_bytes);

// Calls on_document(text) for each document of `path`, in file order.
// on_bytes(n) reports progress: n more input bytes consumed. With `range` (one of
// jsonl_pieces'), only that piece's lines, errors naming their line in the file.
ReadStats read_documents(const std::string& path, InputFormat format,
                         const std::function<void(std::string_view)>& on_document,
                         const std::function<void(size_t)>& on_bytes = {},
                         const std::string& parquet_column = "text", const FileRange* range = nullptr);

}  // namespace troupe::data
