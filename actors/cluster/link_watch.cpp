#include "actors/cluster/link_watch.h"

#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include <caf/io/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace troupe::actors {
namespace {

using Clock = std::chrono::steady_clock;

int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

double ms_of(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

caf::actor spawn_link_responder(caf::actor_system& sys) {
  return sys.spawn<caf::detached>([](caf::event_based_actor* self) -> caf::behavior {
    return {
        [self](link_ping_atom, int32_t id, uint64_t seq) {
          if (auto to = caf::actor_cast<caf::actor>(self->current_sender())) self->send(to, link_pong_atom::value, id, seq);
        },
    };
  });
}

LinkWatch::LinkWatch(caf::actor_system& sys, std::shared_ptr<Cluster> cluster, std::chrono::milliseconds interval,
                     std::chrono::milliseconds timeout)
    : sys_(sys), cluster_(std::move(cluster)), interval_(interval), timeout_(timeout) {
  thread_ = std::thread([this] { loop(); });
}

LinkWatch::~LinkWatch() { stop(); }

void LinkWatch::stop() {
  if (stopping_.exchange(true)) return;
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mu_);
  for (auto& [id, w] : watched_) ::close(w.link_fd);
  watched_.clear();
}

void LinkWatch::watch(int32_t worker_id, const caf::node_id& node, caf::actor responder, int link_fd,
                      std::string name) {
  std::lock_guard lock(mu_);
  if (auto it = watched_.find(worker_id); it != watched_.end()) ::close(it->second.link_fd);
  watched_[worker_id] = Watched{worker_id, node, std::move(responder), link_fd, std::move(name), Clock::now()};
}

void LinkWatch::forget(const caf::node_id& node) {
  std::lock_guard lock(mu_);
  for (auto it = watched_.begin(); it != watched_.end();) {
    if (it->second.node == node) {
      ::close(it->second.link_fd);
      it = watched_.erase(it);
    } else {
      ++it;
    }
  }
}

void LinkWatch::tick(caf::scoped_actor& self, Clock::time_point scheduled) {
  const auto now = Clock::now();
  // How late this side runs: its own tick, and CAF's I/O loop (the probe posted at the
  // last tick, or, still outstanding, how long it has waited).
  const int64_t posted = probe_->posted_ns.load(), ran = probe_->ran_ns.load();
  const bool outstanding = posted != 0 && ran < posted;
  const auto io_lag = std::chrono::nanoseconds(posted == 0 ? 0 : (outstanding ? now_ns() : ran) - posted);
  const auto own_lag = now - scheduled;
  const auto lag = std::max<Clock::duration>(own_lag, io_lag);
  if (!outstanding) {
    probe_->posted_ns.store(now_ns());
    sys_.middleman().run_later([probe = probe_] { probe->ran_ns.store(now_ns()); });
  }
  std::vector<Watched> dead;
  {
    std::lock_guard lock(mu_);
    if (lag > timeout_ / 2) {
      if (!late_now_) {
        late_now_ = true;
        ++late_episodes_;
        spdlog::warn("cluster: the supervisor's own {} ran {:.0f} ms late; no worker link is judged over that time",
                     own_lag >= io_lag ? "watch" : "I/O loop", ms_of(lag));
      }
      for (auto& [id, w] : watched_) w.last_heard = now;
    } else {
      late_now_ = false;
      for (auto it = watched_.begin(); it != watched_.end();) {
        if (now - it->second.last_heard > timeout_) {
          dead.push_back(it->second);
          it = watched_.erase(it);
        } else {
          ++it;
        }
      }
    }
    ++seq_;
    for (const auto& [id, w] : watched_) self->send(w.responder, link_ping_atom::value, w.id, seq_);
  }
  for (const auto& w : dead) {
    const auto why = fmt::format(
        "its link went silent: no answer to liveness pings for {:.1f} s while the supervisor's own I/O was on time",
        ms_of(now - w.last_heard) / 1000.0);
    spdlog::error("cluster: {}: {}; dropping its connection", w.name, why);
    cluster_->lost(w.node, why);
    ::shutdown(w.link_fd, SHUT_RDWR);
    ::close(w.link_fd);
  }
}

void LinkWatch::loop() {
  caf::scoped_actor self{sys_};
  auto next = Clock::now() + interval_;
  while (!stopping_.load()) {
    for (;;) {
      const auto left = next - Clock::now();
      if (left <= Clock::duration::zero() || stopping_.load()) break;
      self->receive(
          [&](link_pong_atom, int32_t id, uint64_t) {
            std::lock_guard lock(mu_);
            if (auto it = watched_.find(id); it != watched_.end()) it->second.last_heard = Clock::now();
          },
          caf::after(std::chrono::duration_cast<std::chrono::microseconds>(left)) >> [] {});
    }
    if (stopping_.load()) break;
    tick(self, next);
    next += interval_;
    if (next < Clock::now()) next = Clock::now() + interval_;
  }
}

}  // namespace troupe::actors
