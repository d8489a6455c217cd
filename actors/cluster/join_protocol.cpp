#include "actors/cluster/join_protocol.h"

#include <charconv>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace troupe::actors {
namespace {

constexpr size_t kMaxFields = 32;

bool valid_key(const std::string& k) {
  if (k.empty() || k.size() > 32) return false;
  for (char c : k)
    if (!((c >= 'a' && c <= 'z') || c == '_')) return false;
  return true;
}

bool valid_value(const std::string& v) { return v.find('\n') == std::string::npos && v.find('\0') == std::string::npos; }

const std::string& field(const FrameFields& f, const char* key, std::optional<std::string>& error) {
  static const std::string empty;
  const auto it = f.find(key);
  if (it == f.end()) {
    if (!error) error = fmt::format("field '{}' missing", key);
    return empty;
  }
  return it->second;
}

template <class Int>
Int number(const FrameFields& f, const char* key, std::optional<std::string>& error, int base = 10) {
  const auto& text = field(f, key, error);
  Int value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if ((ec != std::errc() || end != text.data() + text.size() || text.empty()) && !error)
    error = fmt::format("field '{}' is not a number: '{}'", key, printable(text, 40));
  return value;
}

bool flag(const FrameFields& f, const char* key, std::optional<std::string>& error) {
  return number<int>(f, key, error) != 0;
}

std::optional<std::string> kind_is(const FrameFields& f, const char* kind) {
  std::optional<std::string> error;
  const auto& k = field(f, "kind", error);
  if (error) return error;
  if (k != kind) return fmt::format("expected a '{}' message, got '{}'", kind, printable(k, 40));
  return std::nullopt;
}

}  // namespace

std::string printable(const std::string& text, size_t max) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < max; ++i) out += text[i] >= 0x20 && text[i] < 0x7f ? text[i] : '?';
  if (text.size() > max) out += "...";
  return out;
}

std::string encode_frame(const FrameFields& fields) {
  std::string payload;
  for (const auto& [k, v] : fields) {
    if (!valid_key(k) || !valid_value(v)) throw std::invalid_argument("join frame: bad field " + k);
    payload += k + "=" + v + "\n";
  }
  if (payload.size() > kMaxFrameBytes)
    throw std::invalid_argument(fmt::format("join frame of {} bytes exceeds {}", payload.size(), kMaxFrameBytes));
  std::string out(kFrameMagic, sizeof kFrameMagic);
  out += char(payload.size() >> 8);
  out += char(payload.size() & 0xff);
  return out + payload;
}

std::optional<std::string> parse_frame_header(const unsigned char* h, size_t& payload_bytes) {
  if (std::memcmp(h, kFrameMagic, sizeof kFrameMagic) != 0)
    return fmt::format("it does not speak troupe's join protocol (first bytes {:02x} {:02x} {:02x} {:02x})", h[0],
                       h[1], h[2], h[3]);
  payload_bytes = (size_t(h[4]) << 8) | h[5];
  if (payload_bytes > kMaxFrameBytes)
    return fmt::format("it declared a join message of {} bytes; the limit is {}", payload_bytes, kMaxFrameBytes);
  return std::nullopt;
}

std::optional<std::string> parse_frame_payload(const std::string& payload, FrameFields& out) {
  out.clear();
  size_t at = 0;
  while (at < payload.size()) {
    const auto end = payload.find('\n', at);
    if (end == std::string::npos) return "a join message line has no end";
    const auto line = payload.substr(at, end - at);
    const auto eq = line.find('=');
    if (eq == std::string::npos) return "a join message line has no '='";
    const auto key = line.substr(0, eq);
    if (!valid_key(key)) return "a join message has a malformed key";
    if (out.size() >= kMaxFields) return fmt::format("a join message has more than {} fields", kMaxFields);
    if (!out.emplace(key, line.substr(eq + 1)).second) return fmt::format("field '{}' given twice", key);
    at = end + 1;
  }
  return std::nullopt;
}

FrameFields to_fields(const JoinHello& m) {
  return {{"kind", "hello"},
          {"protocol", std::to_string(m.protocol)},
          {"config_hash", fmt::format("{:016x}", m.config_hash)},
          {"slots", std::to_string(m.slots)},
          {"host", m.host},
          {"gloo_host", m.gloo_host},
          {"pid", std::to_string(m.pid)},
          {"nonce", m.nonce}};
}
FrameFields to_fields(const JoinChallenge& m) {
  return {{"kind", "challenge"}, {"ok", m.ok ? "1" : "0"}, {"reason", m.reason},
          {"nonce", m.nonce},    {"workdir", m.workdir},   {"proof", m.proof}};
}
FrameFields to_fields(const JoinProof& m) { return {{"kind", "proof"}, {"proof", m.proof}}; }
FrameFields to_fields(const JoinVerdict& m) {
  return {{"kind", "verdict"}, {"ok", m.ok ? "1" : "0"}, {"reason", m.reason}, {"ticket", m.ticket}};
}

std::optional<std::string> from_fields(const FrameFields& f, JoinHello& m) {
  if (auto e = kind_is(f, "hello")) return e;
  std::optional<std::string> error;
  m.protocol = number<int32_t>(f, "protocol", error);
  m.config_hash = number<uint64_t>(f, "config_hash", error, 16);
  m.slots = number<int32_t>(f, "slots", error);
  m.host = field(f, "host", error);
  m.gloo_host = field(f, "gloo_host", error);
  m.pid = number<int64_t>(f, "pid", error);
  m.nonce = field(f, "nonce", error);
  return error;
}
std::optional<std::string> from_fields(const FrameFields& f, JoinChallenge& m) {
  if (auto e = kind_is(f, "challenge")) return e;
  std::optional<std::string> error;
  m.ok = flag(f, "ok", error);
  m.reason = field(f, "reason", error);
  m.nonce = field(f, "nonce", error);
  m.workdir = field(f, "workdir", error);
  m.proof = field(f, "proof", error);
  return error;
}
std::optional<std::string> from_fields(const FrameFields& f, JoinProof& m) {
  if (auto e = kind_is(f, "proof")) return e;
  std::optional<std::string> error;
  m.proof = field(f, "proof", error);
  return error;
}
std::optional<std::string> from_fields(const FrameFields& f, JoinVerdict& m) {
  if (auto e = kind_is(f, "verdict")) return e;
  std::optional<std::string> error;
  m.ok = flag(f, "ok", error);
  m.reason = field(f, "reason", error);
  m.ticket = field(f, "ticket", error);
  return error;
}

std::string supervisor_join_text(const std::string& supervisor_nonce, const std::string& worker_nonce,
                                 const std::string& workdir, const std::string& binding) {
  return fmt::format("troupe join supervisor\n{}\n{}\n{}\n{}", supervisor_nonce, worker_nonce, workdir, binding);
}

std::string worker_join_text(const std::string& supervisor_nonce, const std::string& worker_nonce,
                             const std::string& binding) {
  return fmt::format("troupe join worker\n{}\n{}\n{}", supervisor_nonce, worker_nonce, binding);
}

}  // namespace troupe::actors
