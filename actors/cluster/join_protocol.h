// The join handshake of a cluster run (docs/cluster.md "Security"): troupe's own
// bytes on a fresh connection, before CAF's BASP sees any of it. A connection that
// does not finish it never reaches CAF's message parser.
//
//   worker -> supervisor   Hello      protocol, config hash, slots, host, gloo host, pid, nonce Nw
//   supervisor -> worker   Challenge  nonce Ns, working directory D,
//                                     HMAC(secret, "troupe join supervisor" Ns Nw D B)  (or a refusal)
//   worker -> supervisor   Proof      HMAC(secret, "troupe join worker" Ns Nw B)
//   supervisor -> worker   Verdict    a one-use ticket T (or a refusal)
//
// then both sides hand the socket to CAF, and the worker joins with T (JoinRequest).
// B is the TLS channel binding (RFC 5705 keying material of this TLS session) or ""
// on plain TCP: with TLS, an answer relayed from another connection does not verify.
//
// Frame: 4 bytes "TRP1", 2 bytes big-endian payload length (at most kMaxFrameBytes),
// payload: lines "key=value\n" (keys [a-z_], values without newline). Nothing is
// allocated from a declared length beyond kMaxFrameBytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace troupe::actors {

inline constexpr size_t kFrameHeaderBytes = 6;
inline constexpr size_t kMaxFrameBytes = 4096;
inline constexpr char kFrameMagic[4] = {'T', 'R', 'P', '1'};

// A frame's fields. encode_frame throws std::invalid_argument on a key or value that
// cannot be framed; parse_frame_payload returns the reason a payload is malformed.
using FrameFields = std::map<std::string, std::string>;
std::string encode_frame(const FrameFields& fields);
std::optional<std::string> parse_frame_payload(const std::string& payload, FrameFields& out);
// The payload length a header declares, or the reason it is refused (bad magic: the
// first bytes in hex; a length above kMaxFrameBytes).
std::optional<std::string> parse_frame_header(const unsigned char* header, size_t& payload_bytes);

struct JoinHello {
  int32_t protocol = 0;
  uint64_t config_hash = 0;  // 0: the worker has no config of its own
  int32_t slots = 0;
  std::string host, gloo_host;
  int64_t pid = 0;
  std::string nonce;  // at least 16 random bytes as hex
};

struct JoinChallenge {
  bool ok = false;
  std::string reason;  // why the worker is refused (ok = false)
  std::string nonce;
  std::string workdir;  // where relative paths of the config resolve ("" : none)
  std::string proof;    // the supervisor's HMAC
};

struct JoinProof {
  std::string proof;
};

struct JoinVerdict {
  bool ok = false;
  std::string reason;
  std::string ticket;  // redeemed once by the JoinRequest over CAF
};

// `text` fit for a log line: at most `max` characters, anything but printable ASCII
// shown as '?' (what a stranger sends ends up in the supervisor's log).
std::string printable(const std::string& text, size_t max = 64);

// Each to and from frame fields; from_fields returns the reason fields are malformed.
FrameFields to_fields(const JoinHello& m);
FrameFields to_fields(const JoinChallenge& m);
FrameFields to_fields(const JoinProof& m);
FrameFields to_fields(const JoinVerdict& m);
std::optional<std::string> from_fields(const FrameFields& f, JoinHello& m);
std::optional<std::string> from_fields(const FrameFields& f, JoinChallenge& m);
std::optional<std::string> from_fields(const FrameFields& f, JoinProof& m);
std::optional<std::string> from_fields(const FrameFields& f, JoinVerdict& m);

// The texts the two HMACs are computed over.
std::string supervisor_join_text(const std::string& supervisor_nonce, const std::string& worker_nonce,
                                 const std::string& workdir, const std::string& binding);
std::string worker_join_text(const std::string& supervisor_nonce, const std::string& worker_nonce,
                             const std::string& binding);

}  // namespace troupe::actors
