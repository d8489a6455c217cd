// `supervisor run`: train with the actor runtime.
#include <cctype>
#include <cstdlib>
#include <tuple>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <google/protobuf/text_format.h>

#include "actors/cluster/cluster_auth.h"
#include "actors/cluster/cluster_net.h"
#include "actors/runtime.h"
#include "apps/supervisor/cli_args.h"
#include "apps/supervisor/config_args.h"
#include "config/validate.h"
#include "engine/placement.h"
#include "util/sigpipe.h"

namespace troupe::cli {
namespace {

namespace po = boost::program_options;

const char* kUsage =
    "usage: supervisor run [CONFIG] [--set PATH=VALUE]... [--megatron-args FILE] [--quiet]\n"
    "                      [--init HF_DIR] [--listen ADDR:PORT [--secret-file F] [--tls ...]]\n\n"
    "Trains the model CONFIG describes (the embedded default without one) with the actor\n"
    "runtime: data loaders, pipeline stages, optimizer shards and a coordinator under a\n"
    "supervisor, in this process. Prints a startup block, one line per step and a summary;\n"
    "writes metrics.jsonl and TensorBoard events into logging.run_dir. Ctrl-C (SIGINT),\n"
    "SIGTERM or SIGHUP (a closed terminal) stops after the current step, SIGTERM and SIGHUP\n"
    "with a final checkpoint (exit 130 / 143 / 129). A closed standard output (supervisor\n"
    "run | head) stops console output only; the run goes on.\n\n"
    "With --listen (and cluster.workers > 0 in the config) the loaders, stages, optimizer\n"
    "shards and checkpoint writers run in worker processes (supervisor worker --connect\n"
    "ADDR:PORT); this process keeps the supervision tree, the coordinator and the metrics.\n"
    "See docs/cluster.md.\n\n"
    "options:\n";

const char* kRunOptions =
    "  --inject PATH@STEP:PHASE[:KIND[:ARG]]\n"
    "                           add a fault (repeatable), e.g. stage/dp1/pp0/tp0@5:backward:kill;\n"
    "                           KIND is kill (default), hang, throw, corrupt_shard, truncate_shard,\n"
    "                           fail_write, nan_gradient (ARG: the microbatch, default 0),\n"
    "                           delay (the actor sleeps ARG seconds, default 0.1, and goes on),\n"
    "                           request_stop (coordinator: stop as SIGTERM would), or (cluster\n"
    "                           mode) kill_process / stop_process (the worker hosting the actor\n"
    "                           gets SIGKILL / SIGSTOP); docs/runtime.md lists each actor's phases\n"
    "  --init HF_DIR            start from the weights of a Hugging Face model directory\n"
    "                           (shorthand for --set training.init_from=HF_DIR, applied last;\n"
    "                           its config.json must match the model section; a checkpoint to\n"
    "                           resume from takes precedence: docs/huggingface.md)\n"
    "  --quiet                  no step lines or summary on stdout (files are still written)\n"
    "  --listen ADDR:PORT       cluster mode: wait for cluster.workers + cluster.spares workers here\n"
    "                           (bind 127.0.0.1 unless told otherwise; port 0: any free port,\n"
    "                           written to RUN_DIR/cluster.address)\n"
    "  --secret-file F          the run's secret (default: TROUPE_SECRET; without either a fresh\n"
    "                           one is written to RUN_DIR/cluster.secret, mode 0600)\n"
    "  --tls                    TLS between the processes; with --tls-cert F --tls-key F\n"
    "  --tls-cert F --tls-key F --tls-ca F   both sides need a certificate of that CA,\n"
    "                           else anonymous (encrypted only; docs/cluster.md)\n"
    "  -h, --help               this text\n";

// "stage/dp1/pp0/tp0@5:backward:kill" -> a Fault; throws std::invalid_argument naming the flag.
Fault parse_inject(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument("--inject " + text + ": " + why +
                                 " (expected PATH@STEP:PHASE[:KIND[:ARG]])");
  };
  const auto at = text.find('@');
  if (at == std::string::npos || at == 0) throw bad("no actor path before '@'");
  std::vector<std::string> parts;
  size_t start = at + 1;
  for (;;) {
    const auto colon = text.find(':', start);
    parts.push_back(text.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (parts.size() < 2 || parts.size() > 4) throw bad("wrong number of fields");
  Fault f;
  f.set_actor(text.substr(0, at));
  try {
    size_t used = 0;
    f.set_step(std::stoll(parts[0], &used));
    if (used != parts[0].size() || f.step() < 1) throw std::invalid_argument("");
  } catch (const std::exception&) {
    throw bad("step '" + parts[0] + "' is not a positive integer");
  }
  auto upper = [](std::string v) {
    for (auto& ch : v) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    return v;
  };
  Fault::Phase phase;
  if (!Fault::Phase_Parse(upper(parts[1]), &phase)) throw bad("unknown phase '" + parts[1] + "'");
  f.set_phase(phase);
  if (parts.size() >= 3) {
    Fault::Kind kind;
    if (!Fault::Kind_Parse(upper(parts[2]), &kind)) throw bad("unknown kind '" + parts[2] + "'");
    f.set_kind(kind);
  }
  if (parts.size() == 4 && f.kind() == Fault::DELAY) {
    try {
      size_t used = 0;
      f.set_delay_s(std::stod(parts[3], &used));
      if (used != parts[3].size()) throw std::invalid_argument("");
    } catch (const std::exception&) {
      throw bad("delay '" + parts[3] + "' is not a number of seconds");
    }
  } else if (parts.size() == 4) {
    try {
      f.set_microbatch(std::stoi(parts[3]));
    } catch (const std::exception&) {
      throw bad("microbatch '" + parts[3] + "' is not an integer");
    }
  }
  return f;
}

}  // namespace

int run_main(int argc, char** argv) {
  // From the first line printed: a closed console (`supervisor run | head`) is a failed
  // write, not the end of the run (docs/runtime.md).
  util::ignore_sigpipe();
  ConfigArgs config_args;
  CommandLine cmd("run");
  add_config_options(cmd.options, cmd.positional, config_args);
  std::vector<std::string> injects;
  std::string listen, secret_file, init_from;
  actors::TlsOptions tls;
  cmd.options.add_options()
      ("inject", po::value<std::vector<std::string>>(&injects)->composing())
      ("init", po::value<std::string>(&init_from))
      ("quiet", "")
      ("help,h", "")
      ("listen", po::value<std::string>(&listen))
      ("secret-file", po::value<std::string>(&secret_file))
      ("tls", "")
      ("tls-cert", po::value<std::string>(&tls.certificate))
      ("tls-key", po::value<std::string>(&tls.key))
      ("tls-ca", po::value<std::string>(&tls.ca_file));
  if (const auto status = cmd.parse(argc, argv, std::string(kUsage) + config_options_help() + kRunOptions))
    return *status;
  if (cmd.has("init")) config_args.sets.push_back("training.init_from=" + init_from);
  LoadedConfig loaded = load_config(config_args);
  if (!injects.empty()) {
    try {
      for (const auto& text : injects) *loaded.config.mutable_faults()->add_fault() = parse_inject(text);
    } catch (const std::invalid_argument& e) {
      return cmd.usage_error(e.what());
    }
    config::validate(loaded.config, loaded.origins);
  }
  engine::validate_cluster(loaded.config, loaded.origins);
  actors::RunOptions run;
  tls.enabled = cmd.has("tls");
  if (!listen.empty()) {
    if (!engine::cluster_mode(loaded.config))
      return cmd.usage_error("--listen " + listen + ": the config has no cluster.workers (" + loaded.describe() +
                             "): set cluster.workers to the number of active worker processes");
    actors::ClusterOptions cluster;
    try {
      std::tie(cluster.listen_host, cluster.port) = actors::parse_address(listen, "--listen");
    } catch (const std::invalid_argument& e) {
      return cmd.usage_error(e.what());
    }
    cluster.tls = tls;
    if (!secret_file.empty() || std::getenv("TROUPE_SECRET")) {
      cluster.secret = actors::load_secret(secret_file);
    } else {
      const auto path = loaded.config.logging().run_dir() + "/cluster.secret";
      cluster.secret = actors::create_secret_file(path);
      std::fprintf(stderr, "supervisor run: a fresh secret for this run is in %s: start workers with --secret-file %s\n",
                   path.c_str(), path.c_str());
    }
    run.cluster = std::move(cluster);
  } else if (engine::cluster_mode(loaded.config)) {
    return cmd.usage_error("the config sets cluster.workers = " + std::to_string(loaded.config.cluster().workers()) +
                           ": start the run with --listen ADDR:PORT (and the workers with supervisor worker)");
  }
  run.console = !cmd.has("quiet");
  run.config_source = loaded.describe();
  if (loaded.origins.has("model.hidden_dropout") || loaded.origins.has("model.attention_dropout"))
    run.dropout_origin = loaded.origins.where(loaded.origins.has("model.hidden_dropout") ? "model.hidden_dropout"
                                                                                           : "model.attention_dropout");
  google::protobuf::TextFormat::PrintToString(loaded.config, &run.config_text);
  const auto result = actors::run_training(loaded.config, run);
  if (result.failure) {
    std::fprintf(stderr, "supervisor run: training failed: %s\n", result.failure->summary.c_str());
    for (const auto& f : result.failure->failures)
      std::fprintf(stderr, "  %.3f s  %s: %s\n", f.seconds_since_start, f.path.c_str(), f.reason.c_str());
  } else if (result.outcome.status == "failed") {
    std::fprintf(stderr, "supervisor run: training failed: %s\n", result.outcome.error.c_str());
  } else if (result.outcome.status == "interrupted") {
    std::fprintf(stderr, "supervisor run: interrupted (%s) after step %lld; metrics flushed\n",
                 result.outcome.error.c_str(), static_cast<long long>(result.outcome.summary.steps));
  }
  for (const auto& q : result.quarantine) {
    const auto by = q.replaced_by >= 0 ? "; replaced by worker " + std::to_string(q.replaced_by)
                    : q.shrunk_to > 0  ? "; no spare: the run went on with " + std::to_string(q.shrunk_to) +
                                            " physical replica(s)"
                                       : std::string("");
    std::fprintf(stderr, "supervisor run: quarantined worker %d (%s, pid %lld) at %.3f s: %s%s\n", q.worker_id,
                 q.host.c_str(), static_cast<long long>(q.pid), q.run_seconds, q.error.c_str(), by.c_str());
  }
  return result.exit_code();
}

}  // namespace troupe::cli
