#include "actors/cluster/worker_process.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/cluster_auth.h"
#include "actors/cluster/join_client.h"
#include "actors/cluster/link_watch.h"
#include "actors/cluster/cluster_protocol.h"
#include "actors/cluster/store_actor.h"
#include "actors/cluster/worker_host.h"
#include "engine/topology.h"

namespace troupe::actors {
namespace {

std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal.store(sig); }

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// Ends the process if the orderly shutdown below does not finish in time (an actor
// blocked in a long compute or a store wait must not keep a worker alive).
void arm_hard_exit(int code, std::chrono::seconds after) {
  std::thread([code, after] {
    std::this_thread::sleep_for(after);
    spdlog::error("worker: shutdown took longer than {} s; exiting", after.count());
    spdlog::default_logger()->flush();
    ::_exit(code);
  }).detach();
}

// Knocks until admitted, refused, or `connect_timeout` has passed.
KnockResult knock_with_retry(caf::actor_system& sys, const WorkerOptions& o, const std::string& secret) {
  KnockOptions k;
  k.host = o.host;
  k.port = o.port;
  k.secret = secret;
  k.hello.protocol = o.protocol != 0 ? o.protocol : kClusterProtocolVersion;
  k.hello.config_hash = o.config_hash;
  k.hello.slots = o.slots > 0 ? o.slots : int32_t(std::max(1u, std::thread::hardware_concurrency()));
  k.hello.host = host_name();
  k.hello.gloo_host = o.gloo_host;
  k.hello.pid = ::getpid();
  if (o.net.tls.enabled) k.tls = make_tls_context(o.net.tls, /*server=*/false);
  const auto deadline = std::chrono::steady_clock::now() + o.connect_timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    k.attempt_timeout = std::clamp(left, std::chrono::milliseconds(1000), std::chrono::milliseconds(30000));
    auto r = knock(sys, k);
    if (r.kind != KnockResult::Kind::unreachable) return r;
    if (std::chrono::steady_clock::now() >= deadline || g_signal.load()) {
      r.message = fmt::format("gave up reaching the supervisor after {} ms: {}", o.connect_timeout.count(), r.message);
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

template <class Reply, class Request>
Reply ask(caf::scoped_actor& self, const caf::actor& to, Request request, const char* what) {
  Reply reply;
  std::string error;
  self->request(to, std::chrono::seconds(30), std::move(request))
      .receive([&](Reply& r) { reply = std::move(r); }, [&](caf::error& e) { error = self->system().render(e); });
  if (!error.empty()) throw std::runtime_error(fmt::format("{}: no answer from the supervisor: {}", what, error));
  return reply;
}

int host_until_done(caf::actor_system& sys, const WorkerOptions& o, const std::string& secret) {
  caf::scoped_actor self{sys};
  const auto admitted = knock_with_retry(sys, o, secret);
  switch (admitted.kind) {
    case KnockResult::Kind::joined: break;
    case KnockResult::Kind::refused: spdlog::error("worker: {}", admitted.message); return kWorkerRefused;
    case KnockResult::Kind::unusable:
    case KnockResult::Kind::unreachable: spdlog::error("worker: {}", admitted.message); return 1;
  }
  const auto& registrar = admitted.registrar;
  auto host = spawn_worker_host(sys);
  const auto responder = spawn_link_responder(sys);
  // However this function ends, the host and the responder end with it (the actor
  // system waits for them).
  struct EndHost {
    caf::actor host, responder;
    ~EndHost() {
      caf::anon_send_exit(host, caf::exit_reason::kill);
      caf::anon_send_exit(responder, caf::exit_reason::kill);
    }
  } end_host{host, responder};
  const auto welcome = ask<Welcome>(self, registrar, JoinRequest{admitted.ticket, host, responder}, "joining");
  if (!welcome.ok) {
    spdlog::error("worker: refused by the supervisor at {}:{}: {}", o.host, o.port, welcome.reason);
    return kWorkerRefused;
  }

  const auto& workdir = admitted.workdir;
  if (!workdir.empty() && std::filesystem::current_path() != std::filesystem::path(workdir)) {
    spdlog::info("worker: working in {} (the supervisor's directory: the config's relative paths resolve there)",
                 workdir);
    std::filesystem::current_path(workdir);
  }

  auto args = std::make_shared<WorkerHostArgs>();
  if (!args->config.ParseFromString(welcome.config))
    throw std::runtime_error("the supervisor sent a config this worker cannot parse");
  args->worker_id = welcome.worker_id;
  args->run_id = welcome.run_id;
  args->registrar = registrar;
  args->store = std::make_shared<ActorStore>(sys, welcome.store, "the supervisor's store");
  args->gloo.host = o.gloo_host;
  args->gloo.timeout = engine::collective_timeout(args->config);
  args->faults = std::make_shared<engine::FaultPlan>(args->config);
  // A fault that fires here is reported (and acknowledged) before it acts, so the
  // run's plan fires it once even when this process dies of it.
  const int32_t id = welcome.worker_id;
  args->faults->set_fire_hook([&sys, registrar, id](int32_t index, const Fault&) {
    caf::scoped_actor reporter{sys};
    FaultFired f{id, index, std::chrono::steady_clock::now().time_since_epoch().count(), host_name()};
    reporter->request(registrar, std::chrono::seconds(5), f).receive([](bool) {}, [](caf::error&) {});
  });
  engine::set_process_fault_hook([id](const Fault& f, const std::string& what) {
    if (f.kind() == Fault::KILL_PROCESS) {
      spdlog::error("worker {}: {}: killing this process (SIGKILL)", id, what);
      spdlog::default_logger()->flush();
      ::kill(::getpid(), SIGKILL);
      ::_exit(137);
    }
    spdlog::error("worker {}: {}: stopping this process (SIGSTOP)", id, what);
    spdlog::default_logger()->flush();
    // Directed at this thread: it stops before kill() returns to it. A stop sent to the
    // process may be taken by another thread, and this one would run on (and raise the
    // fault as an ordinary failure) before the whole process stops.
    ::raise(SIGSTOP);
    spdlog::warn("worker {}: continued after SIGSTOP", id);
  });
  spdlog::info("worker {}: joined run {} at {}:{}", id, welcome.run_id, o.host, o.port);
  self->monitor(host);
  self->send(host, ConfigureHost{args});

  int code = 1;
  bool running = true;
  bool asked_to_leave = false;
  self->receive_while([&] { return running; })(
      [&](caf::down_msg& dm) {
        if (dm.source != host.address()) return;
        code = !dm.reason || dm.reason == caf::exit_reason::normal ? 0 : 1;
        running = false;
      },
      caf::after(std::chrono::milliseconds(200)) >> [&] {
        if (g_signal.load() && !asked_to_leave) {
          asked_to_leave = true;
          spdlog::warn("worker {}: signal {}: leaving the run", id, g_signal.load());
          self->send(host, LeaveRun{fmt::format("signal {}", g_signal.load())});
        }
      });
  return g_signal.load() ? 128 + g_signal.load() : code;
}

}  // namespace

int run_worker(const WorkerOptions& o) {
  const auto secret = load_secret(o.secret_file);
  g_signal.store(0);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  int code = 1;
  {
    caf::actor_system_config cfg;
    configure_network(cfg, o.net);
    caf::actor_system sys{cfg};
    try {
      code = host_until_done(sys, o, secret);
    } catch (const std::exception& e) {
      spdlog::error("worker: {}", e.what());
      code = 1;
    }
    arm_hard_exit(code, std::chrono::seconds(15));
  }
  spdlog::default_logger()->flush();
  return code;
}

}  // namespace troupe::actors
