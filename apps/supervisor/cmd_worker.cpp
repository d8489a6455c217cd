// `supervisor worker`: a worker process of a cluster run (docs/cluster.md).
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <boost/program_options.hpp>

#include "actors/cluster/worker_process.h"
#include "apps/supervisor/cli_args.h"
#include "apps/supervisor/config_args.h"
#include "ckpt/manifest.h"

namespace troupe::cli {
namespace {

namespace po = boost::program_options;

const char* kUsage =
    "usage: supervisor worker --connect ADDR:PORT [--slots N] [--secret-file F] [--host ADDR]\n"
    "                         [--config CONFIG [--set PATH=VALUE]...] [--heartbeat-ms MS]\n"
    "                         [--connection-timeout-ms MS] [--connect-timeout S] [--tls ...]\n\n"
    "Joins the cluster run whose supervisor listens on ADDR:PORT (supervisor run --listen):\n"
    "proves it belongs to the run (HMAC-SHA256 challenge under the run's secret; the secret\n"
    "itself never travels), registers its slots and hosts the stages, optimizer shards,\n"
    "checkpoint writers and data loaders the supervisor places on it. The config comes from\n"
    "the supervisor; with --config (and --set) the worker checks that it is the same (its\n"
    "hash) and is refused otherwise. Ends by itself when the run is over (exit 0), when the\n"
    "supervisor is lost (1) or when it is refused (3).\n\n"
    "options:\n"
    "  --connect ADDR:PORT      the supervisor (required)\n"
    "  --slots N                ranks this worker can host (default: its cores)\n"
    "  --secret-file F          the run's secret (default: the TROUPE_SECRET variable)\n"
    "  --host ADDR              address its communicators listen on and advertise (default\n"
    "                           127.0.0.1; on several machines: this machine's address)\n"
    "  --config CONFIG          check the run's config against this one (with --set, as for run)\n"
    "  --heartbeat-ms MS        heartbeat to the supervisor (default 500; the same as the config's\n"
    "                           cluster.heartbeat_interval_s)\n"
    "  --connection-timeout-ms MS  drop the supervisor after this silence (default 5000:\n"
    "                           cluster.connection_timeout_s)\n"
    "  --connect-timeout S      keep trying to reach the supervisor this long (default 60)\n"
    "  --tls [--tls-cert F --tls-key F --tls-ca F]   TLS, as the supervisor uses it\n"
    "  -h, --help               this text\n";

}  // namespace

int worker_main(int argc, char** argv) {
  actors::WorkerOptions o;
  std::string connect, secret_file;
  ConfigArgs config_args;
  int64_t heartbeat_ms = 500, timeout_ms = 5000, connect_s = 60;
  CommandLine cmd("worker");
  add_config_options(cmd.options, cmd.positional, config_args);
  cmd.options.add_options()
      ("connect", po::value<std::string>(&connect))
      ("slots", po::value<int32_t>(&o.slots))
      ("secret-file", po::value<std::string>(&o.secret_file))
      ("host", po::value<std::string>(&o.gloo_host))
      ("heartbeat-ms", po::value<int64_t>(&heartbeat_ms))
      ("connection-timeout-ms", po::value<int64_t>(&timeout_ms))
      ("connect-timeout", po::value<int64_t>(&connect_s))
      ("tls", "")
      ("tls-cert", po::value<std::string>(&o.net.tls.certificate))
      ("tls-key", po::value<std::string>(&o.net.tls.key))
      ("tls-ca", po::value<std::string>(&o.net.tls.ca_file))
      ("help,h", "")
      // Hidden: claim another protocol version (tests check that it is refused).
      ("protocol", po::value<int32_t>(&o.protocol));
  if (const auto status = cmd.parse(argc, argv, kUsage)) return *status;
  if (connect.empty()) return cmd.usage_error("--connect ADDR:PORT is required (see supervisor worker --help)");
  if (cmd.has("slots") && o.slots < 1)
    return cmd.usage_error("--slots " + std::to_string(o.slots) + ": a worker needs at least one slot");
  if (heartbeat_ms < 1 || timeout_ms < 2 * heartbeat_ms || connect_s < 1)
    return cmd.usage_error("--heartbeat-ms " + std::to_string(heartbeat_ms) + " / --connection-timeout-ms " +
                           std::to_string(timeout_ms) + " / --connect-timeout " + std::to_string(connect_s) +
                           ": need heartbeat >= 1, timeout >= 2 x heartbeat, connect timeout >= 1");
  try {
    std::tie(o.host, o.port) = actors::parse_address(connect, "--connect");
  } catch (const std::invalid_argument& e) {
    return cmd.usage_error(e.what());
  }
  o.net.heartbeat = std::chrono::milliseconds(heartbeat_ms);
  o.net.connection_timeout = std::chrono::milliseconds(timeout_ms);
  o.net.tls.enabled = cmd.has("tls");
  o.connect_timeout = std::chrono::seconds(connect_s);
  if (!config_args.config_path.empty() || !config_args.megatron_args.empty() || !config_args.sets.empty())
    o.config_hash = ckpt::fnv1a64(ckpt::canonical_config_text(load_config(config_args).config));
  return actors::run_worker(o);
}

}  // namespace troupe::cli
