// libFuzzer: any bytes as a checkpoint manifest file. Decoding, the manifest's rules and
// the counter rules of a resume either accept it or throw CheckpointError; anything else
// is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "ckpt/error.h"
#include "ckpt/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto m = troupe::ckpt::decode_manifest(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    troupe::ckpt::check_counters(m, "fuzz");
  } catch (const troupe::ckpt::CheckpointError&) {
  }
  return 0;
}
