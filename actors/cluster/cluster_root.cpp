#include "actors/cluster/cluster_root.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/basp_adopt.h"
#include "actors/cluster/cluster_auth.h"
#include "actors/cluster/cluster_protocol.h"
#include "actors/cluster/registrar_actor.h"
#include "actors/cluster/store_actor.h"
#include "ckpt/manifest.h"
#include "util/durable_file.h"

namespace troupe::actors {
namespace {

// Whether a path of the config that every process opens (run directory, checkpoints,
// data) is relative, so that it names the same files only from the same directory.
bool has_relative_paths(const Config& c) {
  const auto relative = [](const std::string& p) { return !p.empty() && std::filesystem::path(p).is_relative(); };
  const char* data_dir = std::getenv("TROUPE_DATA_DIR");  // the default corpus (data/default_corpus.h)
  const bool default_data = c.data().prefix().empty() && !(data_dir && *data_dir && data_dir[0] == '/');
  return relative(c.logging().run_dir()) || relative(c.checkpoint().dir()) ||
         (c.checkpoint().load() != "latest" && relative(c.checkpoint().load())) || relative(c.data().prefix()) ||
         relative(c.data().vocab_file()) || relative(c.data().merges_file()) || relative(c.data().tokenizer_file()) ||
         default_data;
}

}  // namespace

NetOptions net_options(const Config& c, const TlsOptions& tls) {
  NetOptions o;
  o.heartbeat = std::chrono::milliseconds(int64_t(c.cluster().heartbeat_interval_s() * 1000));
  o.connection_timeout = std::chrono::milliseconds(0);
  o.tls = tls;
  return o;
}

ClusterRoot::ClusterRoot(caf::actor_system& sys, const Config& c, const engine::Topology& placed,
                         const ClusterOptions& options, const std::string& run_dir,
                         std::shared_ptr<engine::FaultPlan> faults, std::shared_ptr<RunBook> book)
    : sys_(sys), config_(c), cluster_(std::make_shared<Cluster>(c, placed)) {
  const std::string run_id = "run-" + random_hex(8);
  store_ = spawn_store_actor(sys);
  comms_ = std::make_shared<ClusterComms>(cluster_, store_, run_id, c);
  const auto ms = [](double s) { return std::chrono::milliseconds(int64_t(s * 1000)); };
  links_ = std::make_shared<LinkWatch>(sys, cluster_, ms(c.cluster().heartbeat_interval_s()),
                                       ms(c.cluster().connection_timeout_s()));
  const auto config_hash = ckpt::fnv1a64(ckpt::canonical_config_text(c));
  RegistrarArgs r;
  r.cluster = cluster_;
  r.tickets = tickets_;
  r.links = links_;
  c.SerializeToString(&r.config);
  r.run_id = run_id;
  r.store = store_;
  r.faults = std::move(faults);
  r.book = std::move(book);
  const auto record = [log = refusals_](const std::string& who, const std::string& why) { log->add(who, why); };
  r.on_refused = record;
  registrar_ = spawn_registrar(sys, std::move(r));
  // No actor may outlive a failed construction: the actor system's destructor would
  // wait for it forever.
  try {
    GateOptions g;
    g.host = options.listen_host;
    g.port = options.port;
    g.secret = options.secret;
    g.protocol = kClusterProtocolVersion;
    g.config_hash = config_hash;
    if (has_relative_paths(c)) g.workdir = std::filesystem::current_path().string();
    if (options.tls.enabled) g.tls = make_tls_context(options.tls, /*server=*/true);
    g.handshake_timeout = ms(c.cluster().handshake_timeout_s());
    g.tickets = tickets_;
    g.on_refused = record;
    // The port is known only once the gate listens; the registrar is published under it.
    auto port = std::make_shared<std::atomic<uint16_t>>(0);
    g.admit = [&sys, registrar = registrar_, port](int fd, std::shared_ptr<SSL> tls) {
      adopt_as_server(sys, fd, std::move(tls), port->load(), registrar);
    };
    gate_ = std::make_unique<Gate>(std::move(g));
    port_ = gate_->port();
    port->store(port_);
    const auto address = fmt::format("{}:{}", options.listen_host, port_);
    spdlog::info("cluster: run {} listening on {}{} (config hash {:016x}); waiting for {} worker(s) and {} spare(s)",
                 run_id, address, options.tls.enabled ? " with TLS" : "", config_hash, c.cluster().workers(),
                 c.cluster().spares());
    if (!run_dir.empty()) {
      std::filesystem::create_directories(run_dir);
      util::write_file_atomically(run_dir + "/cluster.address", address + "\n");
    }
    if (options.on_listening) options.on_listening(port_);
  } catch (...) {
    gate_.reset();
    links_->stop();
    caf::anon_send_exit(registrar_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(store_, caf::exit_reason::user_shutdown);
    throw;
  }
}

ClusterRoot::~ClusterRoot() {
  gate_.reset();
  if (links_) links_->stop();
}

void ClusterRoot::wait_for_workers(const std::function<bool()>& interrupted) {
  const auto timeout = std::chrono::milliseconds(int64_t(config_.cluster().worker_wait_s() * 1000));
  const auto missing = cluster_->wait_until_ready(timeout, interrupted);
  if (!missing.empty())
    throw std::runtime_error(fmt::format("cluster: gave up waiting for workers after {:g} s: {}",
                                         config_.cluster().worker_wait_s(), missing));
}

void ClusterRoot::finish(const std::string& why, std::chrono::milliseconds timeout) {
  if (finished_) return;
  finished_ = true;
  // No one joins any more, and workers leaving now are not losses.
  gate_.reset();
  links_->stop();
  caf::scoped_actor self{sys_};
  self->send(registrar_, run_over_atom::value);
  const auto agents = cluster_->live_agents();
  for (const auto& a : agents) {
    self->monitor(a);
    self->send(a, LeaveRun{why});
  }
  size_t left = agents.size();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (left > 0) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      spdlog::warn("cluster: {} worker(s) did not leave within {} ms", left, timeout.count());
      break;
    }
    self->receive([&](caf::down_msg&) { --left; },
                  caf::after(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now)) >> [] {});
  }
  self->send_exit(registrar_, caf::exit_reason::user_shutdown);
  self->send_exit(store_, caf::exit_reason::user_shutdown);
}

std::vector<Refusal> ClusterRoot::refusals() const { return refusals_->kept(); }

int64_t ClusterRoot::refusals_total() const { return refusals_->total(); }

}  // namespace troupe::actors
