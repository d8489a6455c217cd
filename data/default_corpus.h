// The embedded default corpus: Debian's fortunes (package `fortunes`, installed by
// scripts/setup.sh), prepared with the byte tokenizer on first use.
//
// Where: $TROUPE_DATA_DIR if set, else runs/data under the working directory; the
// dataset is <dir>/fortunes-bytes.{bin,idx}, with <dir>/fortunes-bytes.sources
// listing the fortune files (name, size, mtime) it was made from. It is prepared
// again when that listing no longer matches /usr/share/games/fortunes. Where that
// folder holds no fortune files (a machine without the package), a corpus already
// prepared in the data dir is used as it is.
//
// What: every regular file of the fortunes directory except strfile's *.dat and the
// *.u8 symlinks; each fortune ('%'-separated entry) is one document. Documents are
// written in an order shuffled with a fixed seed, so that the contiguous validation
// split (data.split) draws from every fortune file.
//
// Safety: bytes go to temporary names and are renamed into place, the .sources
// file last; two processes preparing at once both write the same bytes and each
// rename is atomic.
#pragma once

#include <string>

namespace troupe::data {

inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

std::string default_data_dir();

// Returns the dataset prefix, preparing it first when needed.
std::string ensure_default_corpus(const std::string& fortunes_dir = kFortunesDir,
                                  const std::string& data_dir = default_data_dir());

}  // namespace troupe::data
