// Parquet corpus files, read by Apache Arrow's own Parquet reader (pyarrow) in a python3
// child process. No Parquet library is packaged for Debian 12, and troupe does not
// hand-write one, so it links none: where the interpreter ($TROUPE_PYTHON, else python3
// on PATH) cannot import pyarrow, the file is refused with that reason.
//
// The child reads the file a row group at a time and writes each value of the string
// column as a frame: u64 little-endian byte length, then the UTF-8 bytes. A null value
// is an empty document (skipped and counted as the other formats' empty ones). Its own
// errors (no such column, a column that is not strings, a damaged file) come as one
// frame of length 2^64 - 1 followed by a frame holding the message; the child exits 0
// after the last frame, so any other exit is an error too.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace troupe::data {

// Calls emit(text) for each value of `column` in `path`, in file order. Throws
// DataError naming the file (and the column) when the child cannot start, cannot import
// pyarrow, or reports an error; the child is always reaped.
void read_parquet_documents(const std::string& path, const std::string& column,
                            const std::function<void(std::string_view)>& emit);

}  // namespace troupe::data
