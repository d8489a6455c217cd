#include "actors/worker_process.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/cluster_auth.h"
#include "actors/cluster_protocol.h"
#include "actors/store_actor.h"
#include "actors/worker_host.h"
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

caf::actor connect_with_retry(caf::actor_system& sys, const WorkerOptions& o) {
  const auto deadline = std::chrono::steady_clock::now() + o.connect_timeout;
  std::string last;
  for (;;) {
    try {
      return connect_to(sys, o.host, o.port, o.net.tls.enabled);
    } catch (const std::exception& e) {
      last = e.what();
    }
    if (std::chrono::steady_clock::now() >= deadline || g_signal.load())
      throw std::runtime_error(fmt::format("gave up reaching the supervisor after {} ms: {}",
                                           o.connect_timeout.count(), last));
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
  const auto registrar = connect_with_retry(sys, o);

  WorkerHello hello;
  hello.protocol = o.protocol != 0 ? o.protocol : kClusterProtocolVersion;
  hello.config_hash = o.config_hash;
  hello.slots = o.slots > 0 ? o.slots : int32_t(std::max(1u, std::thread::hardware_concurrency()));
  hello.host = host_name();
  hello.gloo_host = o.gloo_host;
  hello.pid = ::getpid();
  hello.nonce = random_hex(32);
  const auto challenge = ask<Challenge>(self, registrar, hello, "joining");
  if (!challenge.ok) {
    spdlog::error("worker: refused by the supervisor at {}:{}: {}", o.host, o.port, challenge.reason);
    return kWorkerRefused;
  }
  // Relative paths in the config resolve in the supervisor's working directory: it must
  // exist here too (one machine, or a shared file system mounted at the same path).
  if (!challenge.workdir.empty() && !std::filesystem::is_directory(challenge.workdir)) {
    spdlog::error("worker: the config has relative paths (run directory, checkpoints or data) and the supervisor "
                  "resolves them in {}, which does not exist on this machine ({}): mount the shared file system at "
                  "the same path, or give the config absolute paths; not joining",
                  challenge.workdir, hello.host);
    return 1;
  }
  // The proof goes first, so that a worker with a wrong secret is refused (and logged)
  // by the supervisor; the supervisor's own proof is checked before anything is hosted.
  auto host = spawn_worker_host(sys);
  // However this function ends, the host ends with it (the actor system waits for it).
  struct EndHost {
    caf::actor host;
    ~EndHost() { caf::anon_send_exit(host, caf::exit_reason::kill); }
  } end_host{host};
  WorkerProof proof;
  proof.session = challenge.session;
  proof.proof = hmac_sha256_hex(secret, worker_proof_text(challenge.session, challenge.nonce, hello.nonce));
  proof.host = host;
  const auto welcome = ask<Welcome>(self, registrar, proof, "proving membership");
  const auto expected = hmac_sha256_hex(secret, supervisor_proof_text(challenge.session, challenge.nonce, hello.nonce, challenge.workdir));
  if (!welcome.ok || !same_secret_text(expected, challenge.supervisor_proof)) {
    if (!welcome.ok)
      spdlog::error("worker: refused by the supervisor at {}:{}: {}", o.host, o.port, welcome.reason);
    else
      spdlog::error("worker: the supervisor at {}:{} could not prove it knows this run's secret; not hosting anything",
                    o.host, o.port);
    return kWorkerRefused;
  }

  if (!challenge.workdir.empty() && std::filesystem::current_path() != std::filesystem::path(challenge.workdir)) {
    spdlog::info("worker: working in {} (the supervisor's directory: the config's relative paths resolve there)",
                 challenge.workdir);
    std::filesystem::current_path(challenge.workdir);
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
