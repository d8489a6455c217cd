// libFuzzer: any bytes as what a stranger sends the supervisor's gate before it has
// proved anything (actors/cluster/join_protocol.h): a frame header, then its payload as each of
// the four join messages. Every input is either refused with a reason or parsed into
// fields within the limits; a crash, a sanitizer report or an allocation past
// kMaxFrameBytes is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "actors/cluster/join_protocol.h"

using namespace troupe::actors;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kFrameHeaderBytes) return 0;
  size_t declared = 0;
  if (parse_frame_header(data, declared)) return 0;
  if (declared > kMaxFrameBytes) __builtin_trap();  // the header check let a large length through
  const std::string payload(reinterpret_cast<const char*>(data + kFrameHeaderBytes),
                            std::min(declared, size - kFrameHeaderBytes));
  FrameFields fields;
  if (parse_frame_payload(payload, fields)) return 0;
  JoinHello hello;
  JoinChallenge challenge;
  JoinProof proof;
  JoinVerdict verdict;
  if (!from_fields(fields, hello)) (void)printable(hello.host);
  (void)from_fields(fields, challenge);
  (void)from_fields(fields, proof);
  (void)from_fields(fields, verdict);
  return 0;
}
