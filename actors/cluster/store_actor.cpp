#include "actors/cluster/store_actor.h"

#include <map>

#include <fmt/format.h>

#include "actors/cluster/cluster_protocol.h"

namespace troupe::actors {
namespace {

using wait_timeout_atom = caf::atom_constant<caf::atom("waittmo")>;

struct PendingWait {
  StoreWait request;
  caf::typed_response_promise<StoreReply> promise;
};

struct StoreState {
  std::map<std::string, std::vector<char>> values;
  std::map<uint64_t, PendingWait> waits;
  std::map<std::string, std::string> aborted;  // prefix -> why
  uint64_t next_wait = 0;
};

using Self = caf::stateful_actor<StoreState>;

std::vector<std::string> missing_keys(const StoreState& st, const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  for (const auto& k : keys)
    if (!st.values.count(k)) out.push_back(k);
  return out;
}

// The abort that covers `key`, if any.
const std::string* aborted_for(const StoreState& st, const std::string& key) {
  for (const auto& [prefix, why] : st.aborted)
    if (key.compare(0, prefix.size(), prefix) == 0) return &why;
  return nullptr;
}

StoreReply answer(const StoreState& st, const StoreWait& w) {
  StoreReply r;
  r.ok = true;
  if (w.want_value && !w.keys.empty()) r.value = st.values.at(w.keys.front());
  return r;
}

void settle_waits(Self* self) {
  auto& st = self->state;
  for (auto it = st.waits.begin(); it != st.waits.end();) {
    if (missing_keys(st, it->second.request.keys).empty()) {
      it->second.promise.deliver(answer(st, it->second.request));
      it = st.waits.erase(it);
    } else {
      ++it;
    }
  }
}

caf::behavior store_impl(Self* self) {
  return {
      [self](StoreSet& s) {
        auto& st = self->state;
        StoreReply r;
        if (const auto* why = aborted_for(st, s.key)) {
          r.error = fmt::format("key '{}' belongs to an abandoned generation ({})", s.key, *why);
          return r;
        }
        if (st.values.count(s.key)) {
          r.error = fmt::format("key '{}' is set already: is a store prefix used twice?", s.key);
          return r;
        }
        st.values.emplace(s.key, std::move(s.value));
        settle_waits(self);
        r.ok = true;
        return r;
      },
      [self](StoreWait& w) -> caf::result<StoreReply> {
        auto& st = self->state;
        for (const auto& k : w.keys)
          if (const auto* why = aborted_for(st, k)) {
            StoreReply r;
            r.error = fmt::format("waiting for '{}': the generation was abandoned ({})", k, *why);
            return r;
          }
        if (missing_keys(st, w.keys).empty()) return answer(st, w);
        const uint64_t id = st.next_wait++;
        auto promise = self->make_response_promise<StoreReply>();
        const auto timeout = std::chrono::milliseconds(std::max<int64_t>(0, w.timeout_ms));
        st.waits.emplace(id, PendingWait{std::move(w), promise});
        self->delayed_send(self, timeout, wait_timeout_atom::value, id);
        return promise;
      },
      [self](wait_timeout_atom, uint64_t id) {
        auto& st = self->state;
        auto it = st.waits.find(id);
        if (it == st.waits.end()) return;
        StoreReply r;
        r.missing = missing_keys(st, it->second.request.keys);
        r.error = fmt::format("timed out after {} ms", it->second.request.timeout_ms);
        it->second.promise.deliver(std::move(r));
        st.waits.erase(it);
      },
      [self](const StoreAbort& a) {
        auto& st = self->state;
        st.aborted[a.prefix] = a.why;
        for (auto it = st.waits.begin(); it != st.waits.end();) {
          const std::string* why = nullptr;
          for (const auto& k : it->second.request.keys)
            if ((why = aborted_for(st, k))) break;
          if (!why) {
            ++it;
            continue;
          }
          StoreReply r;
          r.error = fmt::format("the generation was abandoned ({})", *why);
          it->second.promise.deliver(std::move(r));
          it = st.waits.erase(it);
        }
      },
  };
}

std::string join(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "'" : ", '") + k + "'";
  return out;
}

// Requests stay pending in the store until their own timeout; the message round trip
// gets this much more before the client gives up on the supervisor.
constexpr std::chrono::milliseconds kTransportMargin{10000};

}  // namespace

caf::actor spawn_store_actor(caf::actor_system& sys) { return sys.spawn(store_impl); }

ActorStore::ActorStore(caf::actor_system& sys, caf::actor store, std::string where)
    : sys_(sys), store_(std::move(store)), where_(std::move(where)) {}

namespace {

// One blocking request to the store; errors are raised after the receive returns.
template <class Request>
StoreReply ask(caf::actor_system& sys, const caf::actor& store, std::chrono::milliseconds timeout,
               Request request, std::string* transport_error) {
  StoreReply reply;
  caf::scoped_actor self{sys};
  self->request(store, timeout, std::move(request))
      .receive([&](StoreReply& r) { reply = std::move(r); },
               [&](caf::error& e) { *transport_error = sys.render(e); });
  return reply;
}

}  // namespace

void ActorStore::set(const std::string& key, std::span<const char> value) {
  std::string transport;
  const auto r = ask(sys_, store_, kTransportMargin,
                     StoreSet{key, std::vector<char>(value.begin(), value.end())}, &transport);
  if (!transport.empty())
    throw comm::CommError(fmt::format("{}: setting '{}' failed: {}", where_, key, transport));
  if (!r.ok) throw comm::CommError(fmt::format("{}: {}", where_, r.error));
}

void ActorStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::string transport;
  const auto r = ask(sys_, store_, timeout + kTransportMargin,
                     StoreWait{keys, timeout.count(), false}, &transport);
  if (!transport.empty())
    throw comm::CommError(fmt::format("{}: waiting for {} failed: {}", where_, join(keys), transport));
  if (r.ok) return;
  if (!r.missing.empty())
    throw comm::StoreTimeout(fmt::format("{}: {} waiting for key(s) {}", where_, r.error, join(r.missing)),
                             r.missing);
  throw comm::CommError(fmt::format("{}: {}", where_, r.error));
}

std::vector<char> ActorStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::string transport;
  auto r = ask(sys_, store_, timeout + kTransportMargin, StoreWait{{key}, timeout.count(), true},
               &transport);
  if (!transport.empty()) throw comm::CommError(fmt::format("{}: getting '{}' failed: {}", where_, key, transport));
  if (!r.ok) {
    if (!r.missing.empty())
      throw comm::StoreTimeout(fmt::format("{}: {} waiting for key '{}'", where_, r.error, key), r.missing);
    throw comm::CommError(fmt::format("{}: {}", where_, r.error));
  }
  return std::move(r.value);
}

}  // namespace troupe::actors
