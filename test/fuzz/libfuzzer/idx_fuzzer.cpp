// libFuzzer: any bytes as a Megatron dataset. The first two bytes give the .bin's length
// (the rest of the input after the .bin is the .idx). Opening either throws DataError or
// gives a dataset whose every sequence reads inside its files; anything else is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "data/error.h"
#include "data/indexed_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string prefix = "/tmp/troupe-idx-fuzzer-" + std::to_string(::getpid());
  if (size < 2) return 0;
  const size_t bin = std::min<size_t>(size - 2, size_t(data[0]) | size_t(data[1]) << 8);
  std::ofstream(prefix + ".bin", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data + 2), std::streamsize(bin));
  std::ofstream(prefix + ".idx", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data + 2 + bin), std::streamsize(size - 2 - bin));
  try {
    const auto ds = troupe::data::IndexedDataset::open(prefix);
    for (int64_t s = 0; s < ds.sequences(); ++s) ds.sequence(s);
  } catch (const troupe::data::DataError&) {
  }
  return 0;
}
