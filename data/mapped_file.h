// Files a user names where a regular file is expected (dataset halves, corpus inputs,
// tokenizer files): opened through util/input_file.h, so a FIFO, directory, socket or
// device is refused, naming the path and what it is, before a byte is read and without
// blocking. Its util::FileError comes out as DataError with the same text.
//
// map_input_file: util::MappedFile, a read-only memory map of a whole regular file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "util/durable_file.h"

namespace troupe::data {

// util::open_regular_file, throwing DataError. Returns the descriptor; the caller closes it.
int open_input_file(const std::string& path, const std::string& what);
// util::read_regular_file, throwing DataError.
std::string read_input_file(const std::string& path, const std::string& what, size_t max_bytes);

// util::MappedFile::open (a read-only map of a regular file: a FIFO, directory, socket
// or device is refused without blocking or reading it; an empty file maps to
// size() == 0), throwing DataError. `what` names the file in errors ("dataset index").
util::MappedFile map_input_file(const std::string& path, const std::string& what);

}  // namespace troupe::data
