#include "actors/runtime.h"

#include <unistd.h>

#include <google/protobuf/text_format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/message_types.h"
#include "actors/metrics_actor.h"
#include "actors/mirror_keeper.h"
#include "actors/scheduler_config.h"
#include "actors/training_group.h"
#include "actors/unix_time.h"
#include "config/derived.h"
#include "config/error.h"
#include "config/model_family.h"
#include "data/batch_source.h"
#include "engine/checkpointing.h"
#include "engine/host_capacity.h"
#include "engine/placement.h"
#include "engine/rank_device.h"
#include "engine/rollback.h"
#include "engine/shard_copies.h"
#include "engine/run_state.h"
#include "engine/storage_space.h"
#include "engine/topology.h"
#include "kernels/cpu/gemm.h"
#include "metrics/json.h"
#include "metrics/run_dir.h"
#include "model/param_registry.h"
#include "sched/planner.h"
#include "sched/schedule_verifier.h"
#include "util/sigpipe.h"


namespace troupe::actors {
namespace {

using group_exit_atom = caf::atom_constant<caf::atom("groupexit")>;
// The writers' or the metrics actor's supervisor ended (its report): past its restart
// limit, the run cannot go on without what it supervises.
using tree_exit_atom = caf::atom_constant<caf::atom("treeexit")>;
constexpr const char* kMetricsSupervisor = "metrics-supervisor";

// The first SIGINT / SIGTERM / SIGHUP asks the run to stop after the current step (SIGHUP,
// a closed terminal or ssh session, as SIGTERM: with a final checkpoint); a second one
// ends the process at once (exit 128 + signal). Complete checkpoints are durable when
// committed, so nothing complete is lost; a save in flight stays a .partial directory.
void on_signal(int sig) {
  if (stop_signal() != 0) ::_exit(128 + sig);
  request_stop(sig);
}

// SIGINT, SIGTERM and SIGHUP stop the run (on_signal) while it lasts, and have their
// default actions again once run_training returns or throws.
struct StopSignals {
  StopSignals() {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, on_signal);
  }
  ~StopSignals() {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, SIG_DFL);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
};

// How long the actor system may take to shut down once the run has ended.
constexpr std::chrono::seconds kTeardownGrace{20};

// Bounds the time from a stop request to the end of run_training, whatever actor is
// stuck: past `grace` after the request it prints one line and ends the process
// (exit 128 + signal). A hung actor is found and replaced within the step watchdog or
// the hang timeout, and a replaced coordinator stops at once, so a healthy stop never
// gets near it.
// It also bounds the teardown (arm_teardown): the actor system's destructor waits for
// every actor to end, and an actor whose detached thread could not be started (a thread
// or memory limit) is registered but never runs, so never ends. Past kTeardownGrace the
// run's own end is printed and the process exits with its status.
class StopDeadline {
 public:
  explicit StopDeadline(double grace_s)
      : thread_([this, grace = std::chrono::duration<double>(grace_s)] {
          std::unique_lock lock(mu_);
          std::optional<std::chrono::steady_clock::time_point> asked;
          while (!done_) {
            cv_.wait_for(lock, std::chrono::milliseconds(100));
            const auto now = std::chrono::steady_clock::now();
            if (!asked && stop_signal() != 0) asked = now;
            if (asked && now - *asked > grace) {
              std::fprintf(stderr, "supervisor: the run did not stop within %.0f s of signal %d; exiting now (the "
                           "newest complete checkpoint is kept)\n", grace.count(), stop_signal());
              std::fflush(stderr);
              ::_exit(128 + stop_signal());
            }
            if (teardown_ && now > teardown_->until) {
              std::fprintf(stderr, "supervisor run: %s\nsupervisor: an actor that could not start kept the actor system "
                           "from shutting down within %lld s; exiting now\n", teardown_->end.c_str(),
                           static_cast<long long>(kTeardownGrace.count()));
              std::fflush(stderr);
              ::_exit(teardown_->exit_code);
            }
          }
        }) {}
  // The run has ended with `exit_code` (`end` says how): the actor system's shutdown
  // starts now.
  void arm_teardown(int exit_code, std::string end) {
    std::lock_guard lock(mu_);
    teardown_ = Teardown{std::chrono::steady_clock::now() + kTeardownGrace, exit_code, std::move(end)};
  }
  ~StopDeadline() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  struct Teardown {
    std::chrono::steady_clock::time_point until;
    int exit_code = 1;
    std::string end;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::optional<Teardown> teardown_;
  std::thread thread_;
};

// How a run ended, in the words supervisor run prints (for a teardown cut short).
std::string describe_end(const RunResult& r) {
  if (r.failure) return "training failed: " + r.failure->summary;
  if (r.outcome.status == "failed") return "training failed: " + r.outcome.error;
  if (r.outcome.status == "interrupted") return "interrupted (" + r.outcome.error + ")";
  return "training " + r.outcome.status;
}

std::string describe_current_exception() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

std::string join(const std::vector<std::string>& v, size_t max_items = 1000) {
  std::string out;
  for (size_t i = 0; i < v.size() && i < max_items; ++i) out += (i ? ", " : "") + v[i];
  if (v.size() > max_items) out += fmt::format(", ... ({} more)", v.size() - max_items);
  return out;
}

metrics::StartupRecord startup_record(const Config& c, const engine::RunState& state, const std::string& source,
                                      const std::string& run_dir, const ckpt::Checkpoint* resume) {
  metrics::StartupRecord r;
  if (resume) r.resumed_from_step = resume->step();
  r.config_path = source;
  r.run_dir = run_dir;
  r.parameters = config::parameter_count(c);
  r.data_parallel = c.parallel().data();
  r.pipeline_parallel = c.parallel().pipeline();
  r.tensor_parallel = c.parallel().tensor();
  r.global_batch_size = c.batch().global_batch_size();
  r.seq_length = c.batch().seq_length();
  r.microbatches_per_replica = config::microbatches_per_replica(c);
  r.train_steps = config::full_updates(c);
  r.actor_paths = engine::all_paths(engine::Topology::logical(c));
  r.skip_samples = state.skip_samples;
  for (const auto& e : c.data().blend()) r.blend.emplace_back(e.prefix(), e.weight());
  r.wall_time = unix_now();
  return r;
}

// Copies of every stage's parameters and every shard's moments.
engine::NamedState collect_state(caf::scoped_actor& self, const caf::actor& group, const Config& c) {
  Registry reg;
  self->request(group, std::chrono::seconds(30), registry_atom::value)
      .receive([&](Registry& r) { reg = std::move(r); },
               [&](caf::error& e) { throw std::runtime_error("registry: " + self->system().render(e)); });
  const auto topo = engine::Topology::logical(c);
  std::vector<engine::StageSnapshot> stages;
  std::vector<engine::OptimSnapshot> shards;
  for (const auto& r : topo.all_ranks()) {
    self->request(reg.at(engine::stage_path(r)), std::chrono::seconds(60), snapshot_atom::value)
        .receive([&](engine::StageSnapshot& s) { stages.push_back(std::move(s)); },
                 [&](caf::error& e) { throw std::runtime_error("snapshot: " + self->system().render(e)); });
    self->request(reg.at(engine::optim_path(r)), std::chrono::seconds(60), snapshot_atom::value)
        .receive([&](engine::OptimSnapshot& s) { shards.push_back(std::move(s)); },
                 [&](caf::error& e) { throw std::runtime_error("snapshot: " + self->system().render(e)); });
  }
  return engine::assemble_state(topo, stages, shards);
}

// The records still in the inbox are written before the metrics actor is stopped. A
// hung metrics actor is replaced by its supervisor meanwhile, so the wait is bounded
// by the hang limit (twice it, plus the successor's start). Returns "" when every
// record is written, else what was left and why (a full disk: the metrics actor's own
// words), for the run's error.
std::string wait_for_metrics(const MetricsInbox& inbox, const Config& c, bool metrics_gone) {
  if (metrics_gone && inbox.size() > 0) {
    const auto why = fmt::format("{} record(s) not written: the metrics actor's supervisor gave up", inbox.size());
    spdlog::error("metrics: {}", why);
    return why;
  }
  const double hang = c.supervision().hang_timeout_s();
  const std::chrono::duration<double> limit(hang > 0 ? 2 * hang + 5 : 10);
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + limit;
  // Records that cannot be written (a full disk) get a few of the metrics actor's
  // retries, not the whole hang limit.
  const auto blocked_limit = start + std::chrono::seconds(3);
  while (inbox.size() > 0 && std::chrono::steady_clock::now() < until) {
    if (!inbox.blocked().empty() && std::chrono::steady_clock::now() > blocked_limit) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const size_t left = inbox.size();
  if (left == 0) return {};
  const auto blocked = inbox.blocked();
  const auto why = blocked.empty()
                       ? fmt::format("{} record(s) not written within {:g} s of the run's end: the metrics actor is "
                                     "stuck",
                                     left, limit.count())
                       : fmt::format("{} record(s) of the run could not be written: {}", left, blocked);
  spdlog::error("metrics: {}", why);
  return why;
}

}  // namespace

int RunResult::exit_code() const {
  if (outcome.status == "completed") return 0;
  if (outcome.status == "interrupted") return 128 + (stop_signal() > 0 ? stop_signal() : SIGINT);
  return 1;
}

void print_startup(const Config& c, const std::string& source, const std::string& dropout_origin) {
  const auto topo = engine::Topology::logical(c);
  const auto& m = c.model();
  const auto& o = c.optimizer();
  spdlog::info("troupe: training {}", source.empty() ? "the embedded default config" : source);
  const config::ModelFamily& f = config::model_family(m);
  std::string family = fmt::format("{} ({}", f.name, f.summary);
  if (f.grouped_query)
    family += fmt::format("; {} kv heads{}", config::kv_heads(m),
                          m.head_dim() > 0 ? fmt::format(", head size {}", m.head_dim()) : "");
  if (!f.learned_positions) family += fmt::format("; rotary theta {:g}{}", m.rope_theta(), m.has_rope_scaling() ? " scaled" : "");
  family += ")";
  spdlog::info("model: {}, {} layers, {} heads, width {}, ffn {}, vocab {} (padded {}), {} positions, {} head, {} "
               "parameters",
               family, m.layers(), m.heads(), m.width(), config::ffn_width(m), m.vocab_size(), config::padded_vocab(c),
               m.max_positions(), m.tied_embeddings() ? "tied" : "untied", config::parameter_count(c));
  if (m.hidden_dropout() > 0 || m.attention_dropout() > 0 || !dropout_origin.empty())
    spdlog::info("dropout: hidden {:g}, attention {:g} (training only; counter-based masks){}", m.hidden_dropout(),
                 m.attention_dropout(), dropout_origin.empty() ? "" : ", from " + dropout_origin);
  spdlog::info("batch: {} sequences x {} tokens per update ({} tokens), micro batch {}, {} microbatches per replica",
               c.batch().global_batch_size(), c.batch().seq_length(), config::tokens_per_update(c),
               c.batch().micro_batch_size(), config::microbatches_per_replica(c));
  spdlog::info("optimizer: AdamW (decoupled decay) lr {:g} -> min {:g}, warmup from {:g} over {} samples, {} decay to "
               "{} samples; beta1 {:g} beta2 {:g} eps {:g} weight decay {:g} clip {:g}",
               o.lr(), o.min_lr(), o.warmup_init(), c.lr_schedule().warmup_samples(),
               LrScheduleConfig::DecayStyle_Name(c.lr_schedule().decay_style()), config::decay_samples(c),
               o.beta1(), o.beta2(), o.eps(), o.weight_decay(), o.clip_grad());
  const model::ParameterRegistry whole(c, model::StageRange::whole(c));
  const auto decay = whole.names(model::DecayGroup::kDecay);
  const auto no_decay = whole.names(model::DecayGroup::kNoDecay);
  spdlog::info("parameter group decay ({} tensors, weight decay {:g}): {}", decay.size(), o.weight_decay(),
               join(decay, 12));
  spdlog::info("parameter group no_decay ({} tensors, weight decay 0): {}", no_decay.size(), join(no_decay, 12));
  spdlog::info("training: {} samples = {} updates, seed {}", c.training().train_samples(), config::full_updates(c),
               c.training().seed());
  spdlog::info("topology: DP{} x PP{} x TP{} ({} schedule, {} optimizer), {} actors:", topo.dp, topo.pp, topo.tp,
               c.parallel().schedule() == ParallelConfig::INTERLEAVED_1F1B
                   ? fmt::format("INTERLEAVED_1F1B, {} chunks a stage", c.parallel().virtual_stages())
                   : ParallelConfig::Schedule_Name(c.parallel().schedule()),
               c.parallel().distributed_optimizer() ? "distributed" : "replicated",
               engine::all_paths(topo).size());
  spdlog::info("  {}", join(engine::all_paths(topo)));
  spdlog::info("placement: {} (parallel.physical_replicas; the numbers depend on the logical layout alone)",
               config::placement_text(c));
  // The machine as the CPU kernels see it: CPU flags, the kernels' ISA, the BLAS and its kernel.
  if (c.device().type() == DeviceConfig::CPU) spdlog::info("compute: {}", kernels::cpu::compute_description());
}

RunResult run_training(const Config& given, const RunOptions& options) {
  // The run's config, as given: what the run changes as it goes is its run state below.
  const Config& c = given;
  engine::check_runtime_device(c);
  // A bad TROUPE_CPU_ISA or TROUPE_CPU_GEMM fails here, before anything is written.
  if (c.device().type() == DeviceConfig::CPU) kernels::cpu::gemm_kernel();
  engine::check_host_capacity(c);
  engine::check_address_space(c);  // under ulimit -v: refused with the numbers, not an abort later
  // The pipeline's op lists checked as a message system (order, FIFO channels, no
  // deadlock, bounds): a violation refuses the start with the first offending op.
  sched::verified_pipeline_schedule(c);
  // Data first: preparing the default corpus or building a sample index happens
  // here, once, not inside an actor.
  const auto train = data::BatchSource::open(c, data::Split::Train);
  if (train.blended()) {
    std::string shares;
    for (int d = 0; d < train.datasets(); ++d)
      shares += fmt::format("{}{} (weight {:g})", d ? ", " : "", train.prefix_of(d), c.data().blend(d).weight());
    spdlog::info("data: a blend of {} datasets, {} training samples in all: {}", train.datasets(),
                 train.samples_per_epoch(), shares);
  }
  if (const int64_t eval = c.training().eval_samples(); eval > 0) {
    // An evaluation reads each validation sample at most once: more would repeat them
    // (and a huge count would only stall the first evaluation).
    const auto valid_source = data::BatchSource::open(c, data::Split::Valid);
    // With a blend: the positions before any dataset of it would repeat a sample.
    const int64_t valid = valid_source.first_epoch_end();
    const std::string what = valid_source.blended()       ? fmt::format("a blend of {} datasets", valid_source.datasets())
                             : c.data().prefix().empty() ? "the default corpus"
                                                         : c.data().prefix();
    if (eval > valid)
      throw config::ConfigError(fmt::format("training.eval_samples: {} is more than the {} samples of the "
                                            "validation split ({}, data.split \"{}\")",
                                            eval, valid, what, c.data().split()));
  }
  // The checkpoint to resume from, read and verified before any actor starts (and
  // before the run directory is written): one named in checkpoint.load that is missing
  // or damaged ends the start with its diagnosis, as does one of another logical layout
  // offered as a placement change. The group's first start takes it from here.
  // (set_aside_earlier_checkpoints below acts only on a fresh start, which reads none.)
  // What the run changes as it goes (engine/run_state.h); `c` stays as configured.
  engine::RunState state = engine::RunState::of(c);
  auto resume = std::make_shared<engine::ResumeSource>(c, state.resume_from);
  const auto first_checkpoint = resume->current();
  if (first_checkpoint) engine::check_resume_layout(c, state.topology(c), *first_checkpoint);
  // config.textproto holds the config the run used; a caller that gives no text (a
  // test, a library user) gets the config printed, so `supervisor replay` can read it.
  std::string config_text = options.config_text;
  if (config_text.empty()) google::protobuf::TextFormat::PrintToString(c, &config_text);
  const auto run_dir = metrics::prepare_run_dir(c.logging().run_dir(), config_text);
  if (options.console) print_startup(c, options.config_source, options.dropout_origin);
  engine::check_checkpoint_space(c);  // a warning when keep_last + 1 checkpoints do not fit

  const auto topo = engine::Topology::logical(c);
  engine::check_fault_plan(c, engine::all_paths(topo));
  const bool clustered = engine::cluster_mode(c);
  if (clustered) {
    if (const auto v = engine::cluster_violations(c); !v.empty())
      throw std::invalid_argument(fmt::format("{}: {}", v.front().field, v.front().rule));
    if (!options.cluster)
      throw std::invalid_argument("cluster.workers is set: the run needs a listen address (supervisor run --listen)");
  } else if (options.cluster) {
    throw std::invalid_argument("--listen needs cluster.workers > 0 in the config (the active worker processes)");
  }
  engine::set_aside_earlier_checkpoints(c);
  // A resume keeps skipping what the checkpoint's run skipped (docs/data.md,
  // "Skipping samples"); the list is checked against the split again.
  if (first_checkpoint && state.add_checkpoint_skips(first_checkpoint->manifest())) {
    data::BatchSource::open(c, data::Split::Train, state.skip_samples);
    spdlog::info("data: skipping {} sample(s) of the train split (data.skip_samples with the checkpoint's)",
                 state.skip_samples.size());
  }
  // A fresh start from a Hugging Face model: its directory checked (config.json
  // against the model section, every tensor's name, shape and dtype) before any actor
  // starts. A checkpoint to resume from takes precedence; the directory is then unused.
  if (!c.training().init_from().empty()) {
    if (first_checkpoint)
      spdlog::info("training.init_from: resuming from checkpoint step {}; {} is not read", first_checkpoint->step(),
                   c.training().init_from());
    else
      spdlog::info("training.init_from: starting from the weights of {}", engine::open_init_from(c).dir());
  }

  clear_stop();
  const StopSignals signals;
  // A closed console (`supervisor run | head`) is a failed write, not the end of the run
  // (the metrics actor stops console output and says so in metrics.jsonl).
  util::ignore_sigpipe();
  const auto& sv = c.supervision();
  // The runtime's own threads (the stop deadline, CAF's scheduler): one that cannot be
  // started (a thread or memory limit) ends the start with one error saying so.
  std::optional<StopDeadline> stop_deadline;
  caf::actor_system_config cfg;
  std::optional<caf::actor_system> system;
  try {
    stop_deadline.emplace(std::max(30.0, 2 * (sv.step_watchdog_s() + sv.hang_timeout_s())));
    configure_scheduler(cfg);
    if (clustered) configure_network(cfg, net_options(c, options.cluster->tls));
    system.emplace(cfg);
  } catch (const std::system_error& e) {
    throw std::runtime_error(std::string("starting the actor runtime's threads: ") + e.what());
  }
  caf::actor_system& sys = *system;
  caf::scoped_actor client{sys};
  auto faults = std::make_shared<engine::FaultPlan>(c);
  auto directory = std::make_shared<Directory>();
  auto book = std::make_shared<RunBook>();
  // A resumed run counts the rollbacks of its earlier processes against the cap
  // (logging.rollback_limit): read before this process writes its own lines.
  if (first_checkpoint && c.logging().on_spike() == LoggingConfig::ROLLBACK) {
    try {
      std::vector<int64_t> spikes;
      for (const auto& r : engine::recorded_rollbacks(run_dir.layout.metrics)) spikes.push_back(r.spike_step);
      book->earlier_rollbacks(std::move(spikes));
    } catch (const std::exception& e) {
      spdlog::warn("logging.on_spike ROLLBACK: the earlier rollbacks are not counted: {}", e.what());
    }
  }
  auto inbox = std::make_shared<MetricsInbox>();

  // The run's one Config: every actor holds this copy, none its own.
  const auto shared_config = std::make_shared<const Config>(c);
  MetricsArgs margs;
  margs.layout = run_dir.layout;
  margs.console = options.console;
  margs.progress_bar = c.logging().progress_bar();
  margs.tensorboard = c.logging().tensorboard();
  margs.log_interval = c.logging().log_interval();
  margs.total_steps = config::full_updates(c);
  margs.faults = faults;
  const auto& lc = c.logging();
  margs.spikes = {lc.spike_window(), lc.spike_min_history(), lc.spike_mad_k(), lc.spike_loss_min_jump(),
                  lc.spike_grad_norm_min_jump()};
  margs.max_unwritten_records = lc.max_unwritten_records();
  margs.tokens = sched::token_plan(c);
  margs.calendar_efficiency = lc.calendar_efficiency();
  margs.inbox = inbox;
  margs.directory = directory;

  RunResult result;
  bool metrics_gone = false;  // the metrics actor's supervisor gave up: nothing writes the records
  caf::actor client_handle = caf::actor_cast<caf::actor>(client);

  // Cluster mode: listen, and wait for the workers before anything is placed.
  std::unique_ptr<ClusterRoot> root;
  if (clustered) {
    root = std::make_unique<ClusterRoot>(sys, c, state.topology(c), *options.cluster, run_dir.layout.root, faults, book);
    try {
      root->wait_for_workers([] { return stop_signal() != 0; });
    } catch (...) {
      root->finish("the run could not start");
      throw;
    }
  }
  auto cluster = root ? root->cluster() : nullptr;

  // This function is the root of the tree: the metrics actor and the checkpoint
  // writers under one_for_one supervisors of their own, started first, then the
  // training group. Actors find the metrics actor and the writers by path in the
  // directory, so restarts of either need no rewiring.
  // The metrics and writers supervisors past their restart limit end the run (the
  // training group cannot go on without what they supervise): the report goes to the
  // client below. Their ordinary exit at the end is ignored there.
  auto tree_exit = [client_handle](const SupervisorReport& r) {
    caf::anon_send(client_handle, tree_exit_atom::value, r);
  };
  auto metrics_sup = spawn_supervisor(sys, [&] {
    SupervisorSpec s;
    s.on_exit = tree_exit;
    s.path = kMetricsSupervisor;
    s.strategy = Strategy::OneForOne;
    s.max_restarts = 3;
    s.directory = directory;
    s.on_failure = [book, faults](const std::string& path, const std::string& reason) {
      spdlog::error("{} failed: {}; restarting it", path, reason);
      faults->release_hangs();  // an injected hang's thread ends; its successor takes over
      book->failure(alone_failure(path, reason, book->max_step_reached()), /*group_restart=*/false);
    };
    ChildSpec metrics{engine::metrics_path(), Restart::Permanent,
                      [margs](caf::event_based_actor* self, int) { return untyped_handle(spawn_metrics(self, margs)); }};
    watch_for_hangs(metrics, c.supervision());
    s.children.push_back(std::move(metrics));
    return s;
  }());
  // The newest shard of each writer, kept in memory (one process only: in cluster mode
  // the writers run on the workers): a group start after a failure heals a damaged file.
  const auto copies = cluster ? nullptr : std::make_shared<engine::ShardCopies>();
  if (copies) resume->heal_from(copies);
  auto writers_spec = writer_group_spec(shared_config, faults, directory, book, copies, cluster);
  writers_spec.on_exit = tree_exit;
  // The state mirror (supervision.state_mirror): every step's optimizer state in memory,
  // kept by an actor beside the writers (in cluster mode by one on each worker, with a
  // copy on its buddy); a group start after a failure resumes from it when it is at least
  // as new as the newest checkpoint on disk.
  const auto mirror = engine::state_mirror_on(c) ? std::make_shared<engine::MirrorBook>(
                                                       cluster ? nullptr : std::make_shared<engine::MirrorStore>())
                                                 : nullptr;
  auto attach_mirror = [&] {
    if (!mirror) return;
    if (cluster)
      resume->mirror_from(mirror, [weak = std::weak_ptr<Cluster>(cluster)](int32_t worker) {
        const auto c = weak.lock();
        return c && c->live_agent(worker);
      });
    else
      resume->mirror_from(mirror);
  };
  attach_mirror();
  if (mirror && !cluster) writers_spec.children.push_back(mirror_keeper_child(shared_config, mirror->store(), directory));
  auto writers_sup = spawn_supervisor(sys, std::move(writers_spec));
  directory->put(engine::writers_supervisor_path(), writers_sup);
  caf::actor group;
  // Stop the tree in order whatever happens: an actor_system cannot be destroyed
  // while actors live, so no exception may skip this.
  bool metrics_waited = false;  // the records were waited for (and what was left said) once
  auto shutdown = [&] {
    if (!metrics_waited) wait_for_metrics(*inbox, c, metrics_gone);
    faults->release_hangs();
    for (auto* sup : {&group, &writers_sup, &metrics_sup}) {
      if (!*sup) continue;
      client->send(*sup, shutdown_atom::value);
      client->wait_for(*sup);
    }
    if (root) {
      root->finish(result.outcome.status.empty() ? "stopped" : "training " + result.outcome.status);
      result.workers = root->cluster()->workers();
      result.quarantine = root->cluster()->quarantine();
      result.refusals = root->refusals();
      result.refusals_total = root->refusals_total();
    }
  };
  try {
    post_metrics(*inbox, *directory,
                 caf::make_message(startup_record(c, state, options.config_source, run_dir.layout.root, first_checkpoint.get())));

    // The training group of each timeline: one, or one more after each rollback
    // (logging.on_spike ROLLBACK) and after each regroup (cluster mode: the run grows
    // back onto a worker that joined). The exit report of a group stopped for either is
    // told apart by its generation (the groups started before it).
    int64_t generation = 0;
    auto start_group = [&] {
      // In cluster mode the placement may have changed since the run started (a lost
      // worker without a spare, a worker that joined after that): the cluster holds it.
      if (cluster) state.physical_replicas = cluster->placed().physical_replicas();
      GroupArgs g{shared_config, state, faults, directory, book, resume, inbox, client_handle, {}, cluster,
                  root ? root->comms() : nullptr, mirror};
      g.on_exit = [client_handle, generation](const SupervisorReport& r) {
        caf::anon_send(client_handle, group_exit_atom::value, generation, r);
      };
      group = spawn_supervisor(sys, training_group_spec(std::move(g)));
    };
    start_group();
    for (;;) {
      std::string ended_for;  // "rollback" or "regroup": another group follows
      int64_t ended_at = 0;   // the group's last finished step
      bool running = true;
      // A supervisor gave up (or its start failed): the run ends as failed with its report.
      auto fail_with = [&](SupervisorReport r) {
        result.failure = std::move(r);
        result.outcome.status = "failed";
        result.outcome.error = result.failure->summary;
        running = false;
      };
      client->receive_while([&] { return running; })(
          [&](finished_atom, RunOutcome& o) {
            if (o.status == "rollback" || o.status == "regroup") {
              ended_for = o.status;
              ended_at = o.steps.empty() ? 0 : o.steps.back().step;
            } else
              result.outcome = std::move(o);
            running = false;
          },
          [&](group_exit_atom, int64_t from, SupervisorReport& r) {
            if (from != generation) return;  // a group stopped for a rollback or a regroup
            fail_with(std::move(r));
          },
          [&](tree_exit_atom, SupervisorReport& r) {
            if (!r.gave_up && r.vetoed.empty() && r.start_failed.empty()) return;
            if (r.path == kMetricsSupervisor) metrics_gone = true;
            fail_with(std::move(r));
          },
          caf::after(options.timeout) >> [&] {
            result.outcome.status = "failed";
            result.outcome.error = fmt::format("the run did not finish within {} s", options.timeout.count());
            running = false;
          });
      if (ended_for.empty()) break;
      client->send(group, shutdown_atom::value);
      client->wait_for(group);
      ++generation;
      // Across processes the stopped group's communicators are abandoned: the next group
      // connects a fresh generation (its placement may differ).
      if (root) root->comms()->abort("the training group ended for a " + ended_for);
      if (ended_for == "rollback") {
        // The coordinator moved the checkpoint root back (engine/rollback.h): the next
        // group starts from the checkpoint kept, skipping the spike's samples. A stop
        // asked meanwhile is seen by the new group's first decision.
        const auto rollback = book->take_rollback();
        state.roll_back(rollback->request, rollback->done);
        data::BatchSource::open(c, data::Split::Train, state.skip_samples);  // the grown list checked against the split
        resume = std::make_shared<engine::ResumeSource>(c, state.resume_from);
        if (mirror) mirror->clear();  // its steps are of the timeline left
      } else {
        // A regroup: the coordinator saved the step the group ended at; the next group
        // resumes from that checkpoint on the larger placement (or on the same one when
        // the worker that made it fit is gone again), computing no step twice.
        const int32_t from = cluster->placed().physical_replicas();  // a shrink may have lowered it since
        const auto to = cluster->grow();
        post_metrics(*inbox, *directory,
                     caf::make_message(event_atom::value, std::string("grow"), ended_at, unix_now(),
                                       metrics::Json{{"from_physical_replicas", from},
                                                     {"physical_replicas", to.value_or(from)},
                                                     {"resume_step", ended_at}}
                                           .dump()));
        state.resume_from = "latest";
        resume = std::make_shared<engine::ResumeSource>(c, state.resume_from);
        // With the state mirror holding that step too, the workers take its shards from
        // the holders' memory (the joined worker over the network) instead of the disk.
        if (mirror) resume->invalidate();
      }
      if (copies) resume->heal_from(copies);
      attach_mirror();
      start_group();
    }
    // A hung metrics actor is replaced meanwhile, and counted below. Records that could
    // not be written fail a run that would otherwise report success.
    metrics_waited = true;
    if (const auto unwritten = wait_for_metrics(*inbox, c, metrics_gone);
        !unwritten.empty() && result.outcome.status != "failed") {
      result.outcome.status = "failed";
      result.outcome.error = unwritten;
    }
    if (options.collect_state && result.outcome.status != "failed") result.state = collect_state(client, group, c);
    result.failures = book->failures();
    result.restarts = book->restarts();
    result.recomputed_steps = book->recomputed_steps();
    result.recoveries = book->recoveries();
    result.rollbacks = book->rollbacks();
  } catch (...) {
    shutdown();
    stop_deadline->arm_teardown(1, "error: " + describe_current_exception());
    throw;
  }
  shutdown();
  stop_deadline->arm_teardown(result.exit_code(), describe_end(result));
  return result;
}

}  // namespace troupe::actors
