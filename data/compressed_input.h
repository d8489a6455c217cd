// Compressed corpus files: gzip (zlib) and Zstandard (libzstd), told apart by their
// first bytes, not by their names. The file stays memory-mapped; its decompressed text
// goes to the caller in chunks, so a corpus larger than memory streams. Several gzip
// members or zstd frames one after another (what `cat a.gz b.gz` and pzstd make) are
// read as one stream.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace troupe::data {

enum class Compression { None, Gzip, Zstd };

// From the file's first bytes: 1f 8b (gzip), 28 b5 2f fd (a zstd frame).
Compression compression_of(std::string_view first_bytes);
const char* compression_name(Compression c);  // "gzip", "zstd", "none"

// Decompresses `compressed` (the whole file `path`) and hands each piece of output to
// on_text, in order; on_consumed(n) reports that n compressed bytes have been consumed
// so far (for progress). Throws DataError naming `path` and the compressed offset when
// the data is damaged or ends inside a member or frame.
void decompress(const std::string& path, std::string_view compressed, Compression c,
                const std::function<void(std::string_view)>& on_text,
                const std::function<void(size_t)>& on_consumed = {});

}  // namespace troupe::data
