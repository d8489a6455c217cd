#include "config/validate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "config/derived.h"
#include "config/model_family.h"
#include "config/error.h"

namespace troupe::config {
namespace {

class Checker {
 public:
  std::vector<Violation> out;

  void fail(std::string field, std::string rule, std::vector<std::string> related = {}) {
    out.push_back({std::move(field), std::move(rule), std::move(related)});
  }
  template <class T>
  void positive(const std::string& field, T v) {
    if (!(v > 0)) fail(field, fmt::format("must be positive, got {}", v));
  }
  template <class T>
  void non_negative(const std::string& field, T v) {
    if (!(v >= 0)) fail(field, fmt::format("must not be negative, got {}", v));
  }
  template <class T>
  void at_most(const std::string& field, T v, T bound) {
    if (v > bound) fail(field, fmt::format("must be at most {}, got {}", bound, v));
  }
  void finite(const std::string& field, double v) {
    if (!std::isfinite(v)) fail(field, fmt::format("must be a finite number, got {}", v));
  }
};

// Upper bounds far above any real model, cluster or machine, so that derived
// products (parameter counts, ranks, thread splits) stay exact in integer arithmetic.
constexpr int32_t kMaxLayers = 16'384;
constexpr int32_t kMaxWidth = 1 << 20;
constexpr int32_t kMaxFfnWidth = 1 << 22;
constexpr int32_t kMaxVocab = 1 << 24;
constexpr int32_t kMaxVocabPadMultiple = 1 << 16;
constexpr int32_t kMaxPositions = 1 << 24;
constexpr int64_t kMaxRanks = 1 << 20;  // tensor x pipeline x data, and each of them
constexpr int32_t kMaxThreads = 4'096;

bool is_lower_alpha(char c) { return c >= 'a' && c <= 'z'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The spike detector's options (metrics/spike_detector.h): a median over at least
// one value, judged once at least one is in; the MAD multiple and the floors on the
// relative jump finite and not negative (0 leaves that part of the rule out).
void check_spike_fields(const LoggingConfig& lg, Checker& k) {
  k.positive("logging.spike_window", lg.spike_window());
  k.positive("logging.spike_min_history", lg.spike_min_history());
  const std::pair<const char*, double> rule[] = {{"logging.spike_mad_k", lg.spike_mad_k()},
                                                 {"logging.spike_loss_min_jump", lg.spike_loss_min_jump()},
                                                 {"logging.spike_grad_norm_min_jump", lg.spike_grad_norm_min_jump()}};
  for (const auto& [field, v] : rule) {
    k.finite(field, v);
    if (std::isfinite(v)) k.non_negative(field, v);
  }
}

// What each model.architecture needs and what it does not have (nothing is silently
// ignored: a Llama knob set on GPT-2 is refused).
void check_family(const Config& c, Checker& k) {
  const auto& m = c.model();
  const int tp = c.parallel().tensor();
  const ModelFamily& f = model_family(m);
  const char* llama = model_family(ModelConfig::LLAMA).name;  // the family that has what GPT2 lacks
  if (!f.grouped_query) {
    if (m.kv_heads() != 0 && m.kv_heads() != m.heads())
      k.fail("model.kv_heads",
             fmt::format("{} needs model.architecture {}: {} attention is multi-head", m.kv_heads(), llama, f.name),
             {"model.architecture"});
    if (m.head_dim() != 0 && (m.width() % m.heads() != 0 || m.head_dim() != m.width() / m.heads()))
      k.fail("model.head_dim",
             fmt::format("{} needs model.architecture {}: {}'s c_attn maps the width to q, k and v of the width "
                         "each (Hugging Face's GPT2Config has no head_dim), so its head size is width / heads",
                         m.head_dim(), llama, f.name),
             {"model.architecture"});
  }
  if (f.learned_positions) {
    if (m.has_rope_theta() || m.has_rope_scaling()) {
      // Name the field that was set (an origin is recorded per leaf).
      const auto& r = m.rope_scaling();
      const char* field = m.has_rope_theta()               ? "model.rope_theta"
                          : r.has_factor()                 ? "model.rope_scaling.factor"
                          : r.has_low_freq_factor()        ? "model.rope_scaling.low_freq_factor"
                          : r.has_high_freq_factor()       ? "model.rope_scaling.high_freq_factor"
                          : r.has_original_max_positions() ? "model.rope_scaling.original_max_positions"
                                                           : "model.rope_scaling";
      k.fail(field, fmt::format("needs model.architecture {}: {} learns absolute positions", llama, f.name),
             {"model.architecture"});
    }
    return;
  }
  if (f.swiglu && m.ffn_width() == 0)
    k.fail("model.ffn_width", fmt::format("must be set for {} (the SwiGLU width; Llama 3 8B: 14336)", f.name),
           {"model.architecture"});
  if (m.head_dim() != 0 && m.head_dim() % 2 != 0)
    k.fail("model.head_dim",
           fmt::format("{} is odd: rotary positions turn pairs of each head's values (head_dim / 2 of them)",
                       m.head_dim()));
  else if (m.head_dim() == 0 && m.width() % m.heads() == 0 && (m.width() / m.heads()) % 2 != 0)
    k.fail("model.heads",
           fmt::format("rotary positions need an even head size; width {} / heads {} = {}", m.width(), m.heads(),
                       m.width() / m.heads()),
           {"model.width"});
  const int64_t kv = kv_heads(m);
  if (m.heads() % kv != 0) {  // also catches kv > heads
    k.fail("model.kv_heads", fmt::format("{} does not divide model.heads = {}", kv, m.heads()), {"model.heads"});
    return;
  }
  if (kv % tp != 0 && tp % kv != 0)
    k.fail("model.kv_heads",
           fmt::format("{} and parallel.tensor = {}: one must divide the other (split the kv heads, or keep "
                       "every kv head on every rank)",
                       kv, tp),
           {"parallel.tensor"});
}

// The pipeline schedule's own needs: the interleaved one splits each stage into
// parallel.virtual_stages chunks and walks groups of p microbatches.
void check_schedule(const Config& c, Checker& k) {
  const auto& p = c.parallel();
  const int v = p.virtual_stages();
  if (v < 1) {
    k.fail("parallel.virtual_stages", fmt::format("{} is not a chunk count (1 or more)", v));
    return;
  }
  if (p.schedule() != ParallelConfig::INTERLEAVED_1F1B) {
    if (v > 1)
      k.fail("parallel.virtual_stages",
             fmt::format("{} model chunks a stage need parallel.schedule INTERLEAVED_1F1B (it is {})", v,
                         ParallelConfig::Schedule_Name(p.schedule())),
             {"parallel.schedule"});
    return;
  }
  if (p.pipeline() < 2)
    k.fail("parallel.schedule", "INTERLEAVED_1F1B needs parallel.pipeline >= 2", {"parallel.pipeline"});
  if (v < 2)
    k.fail("parallel.virtual_stages", "INTERLEAVED_1F1B needs 2 or more model chunks a stage", {"parallel.schedule"});
  if (p.pipeline() >= 1 && c.model().layers() % (p.pipeline() * v) != 0)
    k.fail("parallel.virtual_stages",
           fmt::format("model.layers {} does not divide into parallel.pipeline {} x {} model chunks",
                       c.model().layers(), p.pipeline(), v),
           {"model.layers", "parallel.pipeline"});
  const int64_t per_step = int64_t(c.batch().micro_batch_size()) * std::max(1, p.data());
  if (per_step > 0 && c.batch().global_batch_size() % per_step == 0 && p.pipeline() >= 2) {
    const int64_t m = c.batch().global_batch_size() / per_step;
    if (m % p.pipeline() != 0)
      k.fail("parallel.schedule",
             fmt::format("INTERLEAVED_1F1B walks groups of parallel.pipeline = {} microbatches; the {} microbatches "
                         "per replica (global_batch_size / (micro_batch_size x data)) are not a multiple",
                         p.pipeline(), m),
             {"batch.global_batch_size", "parallel.pipeline"});
  }
  if (c.cluster().workers() > 0)
    k.fail("parallel.schedule",
           fmt::format("INTERLEAVED_1F1B runs in one process only: the last stage's chunks feed the first stage's, "
                       "a link cluster mode does not have (cluster.workers is {})",
                       c.cluster().workers()),
           {"cluster.workers"});
}

// The placement of the data-parallel replicas (docs/layout.md): physical replicas
// that each host a whole number of logical ones.
void check_placement(const Config& c, Checker& k) {
  const auto& p = c.parallel();
  const int physical = p.physical_replicas();
  if (physical == 0 || p.data() < 1) return;
  if (physical < 0 || p.data() % physical != 0) {
    k.fail("parallel.physical_replicas",
           fmt::format("{} does not divide parallel.data = {}: each physical replica hosts a whole number of "
                       "logical ones",
                       physical, p.data()),
           {"parallel.data"});
    return;
  }
  if (physical == p.data()) return;
  // Hosting several logical replicas a worker: what is built so far.
  if (!p.distributed_optimizer())
    k.fail("parallel.physical_replicas",
           fmt::format("{} physical for {} logical replicas needs parallel.distributed_optimizer: a hosted "
                       "replica's update is its own optimizer shard",
                       physical, p.data()),
           {"parallel.distributed_optimizer", "parallel.data"});
  if (c.device().type() != DeviceConfig::CPU)
    k.fail("parallel.physical_replicas",
           fmt::format("{} physical for {} logical replicas runs on the CPU device only so far", physical,
                       p.data()),
           {"device.type", "parallel.data"});
}

// Recomputation's layer count against the layers of a pipeline stage (Megatron's rules).
void check_recompute(const Config& c, Checker& k) {
  const auto& m = c.model();
  if (m.recompute() != ModelConfig::FULL) return;
  // Under the interleaved schedule the count is per model chunk, as Megatron applies it.
  const int chunks =
      c.parallel().schedule() == ParallelConfig::INTERLEAVED_1F1B ? std::max(1, c.parallel().virtual_stages()) : 1;
  if (chunks < 1 || c.parallel().pipeline() < 1 || m.layers() % (c.parallel().pipeline() * chunks) != 0) return;
  const int per_stage = m.layers() / c.parallel().pipeline() / chunks;
  const int n = m.recompute_num_layers();
  if (m.recompute_method() == ModelConfig::BLOCK) {
    if (n < 1 || n > per_stage)
      k.fail("model.recompute_num_layers",
             chunks > 1 ? fmt::format("{} is outside [1, {}], the layers of a model chunk (model.layers / "
                                      "(parallel.pipeline x parallel.virtual_stages); BLOCK recomputes that many of "
                                      "each chunk's layers)",
                                      n, per_stage)
                        : fmt::format("{} is outside [1, {}], the layers of a pipeline stage (model.layers / "
                                      "parallel.pipeline; BLOCK recomputes that many of each stage's layers)",
                                      n, per_stage),
             {"model.recompute_method"});
  } else if (n < 1 || per_stage % n != 0) {
    k.fail("model.recompute_num_layers",
           fmt::format("{} does not divide the {} layers of a pipeline stage (UNIFORM recomputes them in chunks of "
                       "that many)",
                       n, per_stage),
           {"model.recompute_method"});
  }
}

// Field-by-field rules: each looks at one field only.
void check_fields(const Config& c, Checker& k) {
  const auto& m = c.model();
  k.positive("model.layers", m.layers());
  k.at_most("model.layers", m.layers(), kMaxLayers);
  k.positive("model.heads", m.heads());  // at most width (width % heads == 0), or heads x head_dim bounded below
  k.positive("model.width", m.width());
  k.at_most("model.width", m.width(), kMaxWidth);
  k.non_negative("model.ffn_width", m.ffn_width());
  k.at_most("model.ffn_width", m.ffn_width(), kMaxFfnWidth);
  k.positive("model.vocab_size", m.vocab_size());
  k.at_most("model.vocab_size", m.vocab_size(), kMaxVocab);
  k.positive("model.vocab_pad_multiple", m.vocab_pad_multiple());
  k.at_most("model.vocab_pad_multiple", m.vocab_pad_multiple(), kMaxVocabPadMultiple);
  k.positive("model.max_positions", m.max_positions());
  k.at_most("model.max_positions", m.max_positions(), kMaxPositions);
  k.finite("model.init_std", m.init_std());
  k.positive("model.init_std", m.init_std());
  k.finite("model.layernorm_eps", m.layernorm_eps());
  k.positive("model.layernorm_eps", m.layernorm_eps());
  if (m.has_norm_eps()) {
    k.finite("model.norm_eps", m.norm_eps());
    k.positive("model.norm_eps", m.norm_eps());
  }
  for (const auto& [field, p] : {std::pair<const char*, float>{"model.hidden_dropout", m.hidden_dropout()},
                                 {"model.attention_dropout", m.attention_dropout()}})
    if (!(p >= 0.0f && p < 1.0f)) k.fail(field, fmt::format("must lie in [0, 1), got {}", p));
  k.non_negative("model.kv_heads", m.kv_heads());
  k.non_negative("model.head_dim", m.head_dim());
  k.at_most("model.head_dim", m.head_dim(), kMaxWidth);
  if (m.head_dim() > 0 && int64_t(m.heads()) * m.head_dim() > kMaxWidth)
    k.fail("model.head_dim",
           fmt::format("model.heads {} x head_dim {} = {}: the attention width may be at most {}", m.heads(),
                       m.head_dim(), int64_t(m.heads()) * m.head_dim(), kMaxWidth),
           {"model.heads"});
  k.finite("model.rope_theta", m.rope_theta());
  k.positive("model.rope_theta", m.rope_theta());
  if (m.has_rope_scaling()) {
    const auto& r = m.rope_scaling();
    k.finite("model.rope_scaling.factor", r.factor());
    k.finite("model.rope_scaling.low_freq_factor", r.low_freq_factor());
    k.finite("model.rope_scaling.high_freq_factor", r.high_freq_factor());
    if (r.factor() != 0 && !(r.factor() >= 1))
      k.fail("model.rope_scaling.factor", fmt::format("must be 0 (no scaling) or at least 1, got {}", r.factor()));
    k.positive("model.rope_scaling.low_freq_factor", r.low_freq_factor());
    if (!(r.high_freq_factor() > r.low_freq_factor()))
      k.fail("model.rope_scaling.high_freq_factor",
             fmt::format("must exceed low_freq_factor ({}), got {}", r.low_freq_factor(), r.high_freq_factor()),
             {"model.rope_scaling.low_freq_factor"});
    k.positive("model.rope_scaling.original_max_positions", r.original_max_positions());
  }

  const auto& p = c.parallel();
  for (auto [name, v] : {std::pair{"tensor", p.tensor()}, {"pipeline", p.pipeline()}, {"data", p.data()}}) {
    const std::string field = std::string("parallel.") + name;
    k.positive(field, v);
    k.at_most(field, int64_t(v), kMaxRanks);
  }
  if (p.context() != 1)
    k.fail("parallel.context",
           fmt::format("{} is not supported: context parallelism must be 1", p.context()));

  const auto& b = c.batch();
  k.positive("batch.micro_batch_size", b.micro_batch_size());
  k.positive("batch.global_batch_size", b.global_batch_size());
  k.positive("batch.seq_length", b.seq_length());

  const auto& o = c.optimizer();
  for (auto [name, v] : {std::pair{"lr", o.lr()}, {"min_lr", o.min_lr()},
                         {"warmup_init", o.warmup_init()}, {"weight_decay", o.weight_decay()},
                         {"clip_grad", o.clip_grad()}}) {
    const std::string field = std::string("optimizer.") + name;
    k.finite(field, v);
    k.non_negative(field, v);
  }
  k.finite("optimizer.eps", o.eps());
  k.positive("optimizer.eps", o.eps());
  for (auto [name, v] : {std::pair{"beta1", o.beta1()}, {"beta2", o.beta2()}}) {
    if (!(v >= 0.0 && v < 1.0))
      k.fail(std::string("optimizer.") + name, fmt::format("{} is outside [0, 1)", v));
  }

  const auto& s = c.lr_schedule();
  k.non_negative("lr_schedule.warmup_samples", s.warmup_samples());
  k.non_negative("lr_schedule.decay_samples", s.decay_samples());

  const auto& t = c.training();
  k.positive("training.train_samples", t.train_samples());
  k.non_negative("training.eval_interval", t.eval_interval());
  k.non_negative("training.eval_samples", t.eval_samples());
  k.non_negative("training.token_budget", t.token_budget());

  const auto& d = c.data();
  k.positive("data.prefetch_microbatches", d.prefetch_microbatches());
  // Megatron --split: one to three comma-separated non-negative weights, train > 0.
  auto check_split = [&](const std::string& field, const std::string& sp) {
    std::vector<double> w;
    bool ok = true;
    size_t start = 0;
    while (ok) {
      const auto end = sp.find(',', start);
      const std::string part = sp.substr(start, end == std::string::npos ? end : end - start);
      size_t used = 0;
      double v = -1;
      try {
        v = std::stod(part, &used);
      } catch (const std::exception&) {
        ok = false;
      }
      if (!ok || used != part.size() || !(v >= 0) || !std::isfinite(v)) ok = false;
      w.push_back(v);
      if (end == std::string::npos) break;
      start = end + 1;
    }
    if (!ok || w.empty() || w.size() > 3)
      k.fail(field, fmt::format("\"{}\" is not 1 to 3 comma-separated non-negative "
                                "weights (train,valid,test)", sp));
    else if (!(w[0] > 0))
      k.fail(field, fmt::format("\"{}\" gives the training split no weight", sp));
  };
  check_split("data.split", d.split());
  // Blends (docs/data.md, "Blends"): each entry a dataset, once, with a weight > 0.
  auto check_blend = [&](const char* name, const auto& blend, bool whole) {
    std::vector<std::string> seen;
    for (int i = 0; i < blend.size(); ++i) {
      const auto& e = blend.Get(i);
      const std::string at = fmt::format("data.{}[{}]", name, i);
      if (!(e.weight() > 0) || !std::isfinite(e.weight()))
        k.fail(at + ".weight", fmt::format("{} is not a finite weight > 0", e.weight()));
      if (e.prefix().empty())
        k.fail(at + ".prefix", "is empty: each dataset of a blend names its PREFIX (PREFIX.bin + PREFIX.idx)");
      else if (std::find(seen.begin(), seen.end(), e.prefix()) != seen.end())
        k.fail(at + ".prefix", fmt::format("\"{}\" is listed twice in data.{}", e.prefix(), name));
      seen.push_back(e.prefix());
      if (!e.split().empty()) {
        if (whole)
          k.fail(at + ".split", fmt::format("is set, but the datasets of data.{} are read whole", name));
        else
          check_split(at + ".split", e.split());
      }
    }
  };
  check_blend("blend", d.blend(), false);
  check_blend("valid_blend", d.valid_blend(), true);
  check_blend("test_blend", d.test_blend(), true);
  if (!d.blend().empty() && !d.prefix().empty())
    k.fail("data.prefix", "is set beside data.blend: a run reads one dataset (data.prefix) or a blend, not both",
           {"data.blend"});
  if (d.prefix().empty() && d.blend().empty() && (!d.valid_blend().empty() || !d.test_blend().empty()))
    k.fail("data.blend", "is empty while data.valid_blend or data.test_blend is set: name the training data too "
           "(data.prefix or data.blend; the embedded default corpus takes no blend)");
  {
    // data.skip_samples: IDs of the train split's samples; the upper bound needs the
    // sample index (data::BatchSource::open checks it).
    std::vector<int64_t> seen(d.skip_samples().begin(), d.skip_samples().end());
    for (int i = 0; i < d.skip_samples_size(); ++i)
      if (d.skip_samples(i) < 0)
        k.fail("data.skip_samples", fmt::format("entry {} is {}: sample IDs are non-negative", i, d.skip_samples(i)));
    std::sort(seen.begin(), seen.end());
    if (const auto dup = std::adjacent_find(seen.begin(), seen.end()); dup != seen.end())
      k.fail("data.skip_samples", fmt::format("sample ID {} is listed twice", *dup));
  }
  if (d.tokenizer() == DataConfig::GPT2) {
    // Named where the tokenizer was chosen when the file fields were left unset.
    if (d.vocab_file().empty())
      k.fail("data.vocab_file", "the GPT2 tokenizer needs vocab_file (GPT-2's vocab.json)", {"data.tokenizer"});
    if (d.merges_file().empty())
      k.fail("data.merges_file", "the GPT2 tokenizer needs merges_file (GPT-2's merges.txt)", {"data.tokenizer"});
  }
  if (d.tokenizer() == DataConfig::HF_JSON && d.tokenizer_file().empty())
    k.fail("data.tokenizer_file", "the HF_JSON tokenizer needs tokenizer_file (a Hugging Face tokenizer.json)",
           {"data.tokenizer"});
  if (d.tokenizer() != DataConfig::HF_JSON && !d.tokenizer_file().empty())
    k.fail("data.tokenizer_file", fmt::format("only with data.tokenizer HF_JSON, not {}",
                                              DataConfig::Tokenizer_Name(d.tokenizer())),
           {"data.tokenizer"});

  const auto& ck = c.checkpoint();
  k.non_negative("checkpoint.interval_steps", ck.interval_steps());
  k.finite("checkpoint.interval_seconds", ck.interval_seconds());
  k.non_negative("checkpoint.interval_seconds", ck.interval_seconds());
  k.non_negative("checkpoint.keep_last", ck.keep_last());
  k.finite("checkpoint.save_timeout_s", ck.save_timeout_s());
  k.non_negative("checkpoint.save_timeout_s", ck.save_timeout_s());
  k.non_negative("checkpoint.max_lag_steps", ck.max_lag_steps());
  k.non_negative("checkpoint.max_failed_saves", ck.max_failed_saves());

  const auto& sv = c.supervision();
  k.non_negative("supervision.max_restarts", sv.max_restarts());
  k.finite("supervision.intensity_period_s", sv.intensity_period_s());
  k.positive("supervision.intensity_period_s", sv.intensity_period_s());
  k.finite("supervision.heartbeat_interval_s", sv.heartbeat_interval_s());
  k.positive("supervision.heartbeat_interval_s", sv.heartbeat_interval_s());
  k.finite("supervision.step_watchdog_s", sv.step_watchdog_s());
  k.non_negative("supervision.step_watchdog_s", sv.step_watchdog_s());
  k.finite("supervision.hang_timeout_s", sv.hang_timeout_s());
  k.non_negative("supervision.hang_timeout_s", sv.hang_timeout_s());

  for (int i = 0; i < c.faults().fault_size(); ++i) {
    const auto& f = c.faults().fault(i);
    const std::string at = fmt::format("faults.fault[{}]", i);
    if (!f.has_actor())
      k.fail(at + ".actor", "is required (an actor path such as \"stage/dp1/pp0/tp0\")");
    else if (auto why = actor_path_problem(f.actor()))
      k.fail(at + ".actor", fmt::format("\"{}\" is not an actor path: {}", f.actor(), *why));
    if (f.step() < 1) k.fail(at + ".step", fmt::format("must be 1 or more (updates count from 1), got {}", f.step()));
    k.non_negative(at + ".microbatch", f.microbatch());
  }

  k.non_negative("device.threads", c.device().threads());
  k.at_most("device.threads", c.device().threads(), kMaxThreads);

  const auto& lg = c.logging();
  static const std::set<std::string> kLevels = {"trace", "debug", "info",    "warn",
                                                "error", "critical", "off"};
  if (!kLevels.count(lg.level()))
    k.fail("logging.level", fmt::format("\"{}\" is not one of trace, debug, info, warn, error, "
                                        "critical, off", lg.level()));
  k.positive("logging.log_interval", lg.log_interval());
  k.positive("logging.max_unwritten_records", lg.max_unwritten_records());
  if (lg.run_dir().empty()) k.fail("logging.run_dir", "must not be empty");
  check_spike_fields(lg, k);
  k.positive("logging.rollback_steps", lg.rollback_steps());
  k.non_negative("logging.rollback_skip_samples", lg.rollback_skip_samples());
  k.positive("logging.rollback_limit", lg.rollback_limit());
  k.positive("logging.rollback_window_steps", lg.rollback_window_steps());
  if (!(lg.calendar_efficiency() > 0 && lg.calendar_efficiency() <= 1))
    k.fail("logging.calendar_efficiency",
           fmt::format("{} is outside (0, 1] (a share of wall time)", lg.calendar_efficiency()));
}

// logging.on_spike ROLLBACK (docs/metrics.md, "Acting on a spike"): a run in one
// process, whose kept checkpoints always include one at least rollback_steps before any
// step. With interval_steps I and keep_last k, the oldest checkpoint kept when step n
// spikes is at most (k - 1) x I + 1 steps before it, so (k - 1) x I >= rollback_steps - 1.
void check_rollback(const Config& c, Checker& k) {
  const auto& lg = c.logging();
  if (lg.on_spike() != LoggingConfig::ROLLBACK) return;
  if (c.cluster().workers() > 0)
    k.fail("logging.on_spike", "ROLLBACK runs in one process only (cluster.workers is " +
                                   std::to_string(c.cluster().workers()) + "); use SKIP_UPDATE or RECORD",
           {"cluster.workers"});
  const auto& ck = c.checkpoint();
  if (ck.keep_last() > 0 && ck.interval_steps() > 0 &&
      int64_t(ck.keep_last() - 1) * ck.interval_steps() < int64_t(lg.rollback_steps()) - 1)
    k.fail("logging.rollback_steps",
           fmt::format("{} steps back cannot always be reached: checkpoint.keep_last {} x interval_steps {} keeps "
                       "checkpoints only {} steps back (need (keep_last - 1) x interval_steps >= rollback_steps - 1)",
                       lg.rollback_steps(), ck.keep_last(), ck.interval_steps(),
                       int64_t(ck.keep_last() - 1) * ck.interval_steps() + 1),
           {"checkpoint.keep_last", "checkpoint.interval_steps"});
}

// Evaluation (on whenever eval_samples > 0) runs whole microbatches on every replica.
void check_eval_samples(const Config& c, Checker& k) {
  const int64_t samples = c.training().eval_samples();
  if (samples == 0) return;
  const int64_t per_step = int64_t(c.batch().micro_batch_size()) * c.parallel().data();
  const std::vector<std::string> related = {"batch.micro_batch_size", "parallel.data"};
  if (samples < per_step)
    k.fail("training.eval_samples",
           fmt::format("{} is less than one evaluation microbatch per replica "
                       "(batch.micro_batch_size x parallel.data = {}); 0 turns evaluation off",
                       samples, per_step),
           related);
  else if (samples % per_step != 0)
    k.fail("training.eval_samples",
           fmt::format("{} is not a multiple of batch.micro_batch_size x parallel.data = {}",
                       samples, per_step),
           related);
}

// The zero-bubble schedule (ZB-H1): its weight passes fill a pipeline's cool-down, and
// they read each linear layer's input where the forward kept it in the slot, which
// recomputation does not (docs/compute.md, "Split backward").
void check_zero_bubble(const Config& c, Checker& k) {
  const auto& p = c.parallel();
  if (p.schedule() != ParallelConfig::ZB_H1) return;
  if (p.pipeline() < 2)
    k.fail("parallel.schedule", fmt::format("ZB_H1 needs parallel.pipeline >= 2 (got {}): its weight passes fill "
                                            "the pipeline's bubble, and one stage has none",
                                            p.pipeline()),
           {"parallel.pipeline"});
  if (c.model().recompute() != ModelConfig::NONE)
    k.fail("parallel.schedule",
           fmt::format("ZB_H1 needs model.recompute NONE (got {}): the weight pass reads the activations that "
                       "recomputation does not keep",
                       ModelConfig::Recompute_Name(c.model().recompute())),
           {"model.recompute"});
}

// Rules that combine fields; every field they read is known to be in range.
void check_relations(const Config& c, Checker& k) {
  const auto& m = c.model();
  const auto& p = c.parallel();
  const auto& b = c.batch();

  // With model.head_dim set (LLAMA) the heads need not split the width: the head size is given.
  if ((m.head_dim() == 0 || !model_family(m).grouped_query) && m.width() % m.heads() != 0)
    k.fail("model.width", fmt::format("{} is not divisible by model.heads = {}", m.width(), m.heads()), {"model.heads"});
  if (m.heads() % p.tensor() != 0)
    k.fail("model.heads",
           fmt::format("{} is not divisible by parallel.tensor = {}", m.heads(), p.tensor()),
           {"parallel.tensor"});
  check_family(c, k);
  check_recompute(c, k);
  check_zero_bubble(c, k);
  const int64_t ffn = ffn_width(m);
  if (ffn % p.tensor() != 0)
    k.fail("model.ffn_width",
           fmt::format("{} is not divisible by parallel.tensor = {}", ffn, p.tensor()),
           {"parallel.tensor", "model.width"});
  // padded_vocab is a multiple of vocab_pad_multiple * tensor by construction, so
  // the embedding rows always split evenly across tensor-parallel ranks.
  if (m.layers() % p.pipeline() != 0)
    k.fail("model.layers", fmt::format("{} is not divisible by parallel.pipeline = {}",
                                       m.layers(), p.pipeline()),
           {"parallel.pipeline"});
  check_schedule(c, k);
  check_placement(c, k);
  if (p.sequence_parallel() && b.seq_length() % p.tensor() != 0)
    k.fail("parallel.sequence_parallel",
           fmt::format("needs batch.seq_length ({}) divisible by parallel.tensor = {}",
                       b.seq_length(), p.tensor()),
           {"batch.seq_length", "parallel.tensor"});

  const int64_t ranks = int64_t(p.tensor()) * p.pipeline() * p.data();
  if (ranks > kMaxRanks)
    k.fail("parallel.data",
           fmt::format("tensor x pipeline x data = {} ranks, more than {}", ranks, kMaxRanks),
           {"parallel.tensor", "parallel.pipeline"});

  const int64_t per_step = int64_t(b.micro_batch_size()) * p.data();
  if (b.global_batch_size() % per_step != 0)
    k.fail("batch.global_batch_size",
           fmt::format("{} is not divisible by micro_batch_size x parallel.data = {}",
                       b.global_batch_size(), per_step),
           {"batch.micro_batch_size", "parallel.data"});
  if (b.seq_length() > m.max_positions())
    k.fail("batch.seq_length", fmt::format("{} exceeds model.max_positions = {}", b.seq_length(),
                                           m.max_positions()),
           {"model.max_positions"});
  if (c.data().tokenizer() == DataConfig::NONE) {
    if (c.data().prefix().empty())
      k.fail("data.tokenizer", "NONE needs data.prefix: a dataset tokenized elsewhere (the embedded default corpus "
                               "is byte-tokenized)");
    if (c.data().eod_id() < 0 || c.data().eod_id() >= m.vocab_size())
      k.fail(c.data().has_eod_id() ? "data.eod_id" : "data.tokenizer",
             c.data().has_eod_id()
                 ? fmt::format("{} is outside [0, model.vocab_size = {})", c.data().eod_id(), m.vocab_size())
                 : std::string("NONE needs data.eod_id, the dataset's end-of-document ID"),
             {"model.vocab_size"});
  } else if (c.data().tokenizer() == DataConfig::HF_JSON) {
    // The file's vocabulary is checked against model.vocab_size when it is read
    // (data/batch_source.cpp); here only what the config alone says. -1, the default,
    // is no override (a checkpoint's copy of the config spells it out).
    if (c.data().eod_id() != -1 && (c.data().eod_id() < 0 || c.data().eod_id() >= m.vocab_size()))
      k.fail("data.eod_id",
             fmt::format("{} is outside [0, model.vocab_size = {})", c.data().eod_id(), m.vocab_size()),
             {"model.vocab_size"});
  } else if (c.data().has_eod_id()) {
    k.fail("data.eod_id",
           fmt::format("only with data.tokenizer NONE or HF_JSON; {} knows its own end-of-document ID",
                       DataConfig::Tokenizer_Name(c.data().tokenizer())),
           {"data.tokenizer"});
  }
  if (c.data().tokenizer() == DataConfig::BYTES && m.vocab_size() < 257)
    k.fail("model.vocab_size",
           fmt::format("{} is too small for the BYTES tokenizer (256 bytes + EOD = 257)",
                       m.vocab_size()),
           {"data.tokenizer"});

  const auto& o = c.optimizer();
  if (o.min_lr() > o.lr())
    k.fail("optimizer.min_lr", fmt::format("{} exceeds optimizer.lr = {}", o.min_lr(), o.lr()),
           {"optimizer.lr"});
  if (o.warmup_init() > o.lr())
    k.fail("optimizer.warmup_init",
           fmt::format("{} exceeds optimizer.lr = {}", o.warmup_init(), o.lr()),
           {"optimizer.lr"});

  const auto& s = c.lr_schedule();
  const int64_t decay = decay_samples(c);
  if (s.warmup_samples() > decay)
    k.fail("lr_schedule.warmup_samples",
           fmt::format("{} exceeds the decay end {} ({})", s.warmup_samples(), decay,
                       s.decay_samples() > 0 ? "lr_schedule.decay_samples"
                                             : "training.train_samples, as decay_samples is 0"),
           {"lr_schedule.decay_samples", "training.train_samples"});

  const __int128 train_tokens = __int128(c.training().train_samples()) * b.seq_length();
  if (train_tokens > INT64_MAX)
    k.fail("training.train_samples",
           fmt::format("{} x batch.seq_length {} = {} tokens: more than a 64-bit count holds ({})",
                       c.training().train_samples(), b.seq_length(), train_tokens, INT64_MAX),
           {"batch.seq_length"});
  if (c.training().train_samples() < b.global_batch_size())
    k.fail("training.train_samples",
           fmt::format("{} is less than one global batch (batch.global_batch_size = {})",
                       c.training().train_samples(), b.global_batch_size()),
           {"batch.global_batch_size"});

  if (c.training().eval_interval() > 0 && c.training().eval_samples() == 0)
    k.fail("training.eval_interval",
           fmt::format("{} asks for validation every {} updates, but training.eval_samples is 0",
                       c.training().eval_interval(), c.training().eval_interval()),
           {"training.eval_samples"});

  check_eval_samples(c, k);

  const auto& lg = c.logging();
  if (lg.spike_min_history() > lg.spike_window())
    k.fail("logging.spike_min_history",
           fmt::format("{} exceeds logging.spike_window = {}: no step would ever be judged",
                       lg.spike_min_history(), lg.spike_window()),
           {"logging.spike_window"});

  check_rollback(c, k);

  const auto& sv = c.supervision();
  if (sv.step_watchdog_s() > 0 && sv.step_watchdog_s() <= sv.heartbeat_interval_s())
    k.fail("supervision.step_watchdog_s",
           fmt::format("{} must exceed supervision.heartbeat_interval_s = {} (or be 0: off)",
                       sv.step_watchdog_s(), sv.heartbeat_interval_s()),
           {"supervision.heartbeat_interval_s"});
  if (sv.hang_timeout_s() > 0 && sv.hang_timeout_s() <= sv.heartbeat_interval_s())
    k.fail("supervision.hang_timeout_s",
           fmt::format("{} must exceed supervision.heartbeat_interval_s = {} (or be 0: off)", sv.hang_timeout_s(),
                       sv.heartbeat_interval_s()),
           {"supervision.heartbeat_interval_s"});

  for (int i = 0; i < c.faults().fault_size(); ++i) {
    const auto& f = c.faults().fault(i);
    if (f.step() > full_updates(c))
      k.fail(fmt::format("faults.fault[{}].step", i),
             fmt::format("{} is past the last update ({} = train_samples / global_batch_size): "
                         "the fault would never fire",
                         f.step(), full_updates(c)),
             {"training.train_samples"});
    if (f.kind() == Fault::NAN_GRADIENT && f.microbatch() >= microbatches_per_replica(c))
      k.fail(fmt::format("faults.fault[{}].microbatch", i),
             fmt::format("{} is past the last microbatch of a replica ({} per update, counted "
                         "from 0): the fault would never fire",
                         f.microbatch(), microbatches_per_replica(c)),
             {"batch.global_batch_size"});
    if (f.kind() == Fault::DELAY && !(f.delay_s() > 0 && f.delay_s() <= 60))
      k.fail(fmt::format("faults.fault[{}].delay_s", i),
             fmt::format("must be more than 0 and at most 60 (seconds the actor sleeps), got {:g}", f.delay_s()));
    const bool checkpoint_kind = f.kind() == Fault::CORRUPT_SHARD ||
                                 f.kind() == Fault::TRUNCATE_SHARD || f.kind() == Fault::FAIL_WRITE;
    if (checkpoint_kind && f.phase() != Fault::CHECKPOINT_WRITE)
      k.fail(fmt::format("faults.fault[{}].phase", i),
             fmt::format("{} does not fit kind {}: checkpoint faults (CORRUPT_SHARD, "
                         "TRUNCATE_SHARD, FAIL_WRITE) need phase CHECKPOINT_WRITE",
                         Fault::Phase_Name(f.phase()), Fault::Kind_Name(f.kind())),
             {fmt::format("faults.fault[{}].kind", i)});
  }
}

}  // namespace

std::optional<std::string> actor_path_problem(std::string_view path) {
  if (path.empty()) return "it is empty";
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const auto end = path.find('/', start);
    parts.push_back(path.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  const auto kind = parts[0];
  if (kind.empty() || !is_lower_alpha(kind[0])) return "it must start with an actor kind such as \"stage\"";
  for (char ch : kind)
    if (!is_lower_alpha(ch) && !is_digit(ch) && ch != '_')
      return fmt::format("actor kind \"{}\" may hold only a-z, 0-9 and _", kind);
  std::set<std::string_view> seen;
  for (size_t i = 1; i < parts.size(); ++i) {
    const auto part = parts[i];
    if (part.empty()) return "it has an empty segment (\"//\" or a trailing \"/\")";
    size_t letters = 0;
    while (letters < part.size() && is_lower_alpha(part[letters])) ++letters;
    bool digits_only = letters < part.size();
    for (size_t j = letters; j < part.size(); ++j) digits_only = digits_only && is_digit(part[j]);
    if (letters == 0 || !digits_only)
      return fmt::format("segment \"{}\" is not a coordinate like dp1, pp0 or tp0", part);
    if (!seen.insert(part.substr(0, letters)).second)
      return fmt::format("coordinate \"{}\" appears twice", part.substr(0, letters));
  }
  return std::nullopt;
}

std::vector<Violation> violations(const Config& c) {
  Checker k;
  check_fields(c, k);
  if (k.out.empty()) check_relations(c, k);
  return k.out;
}

std::string describe(const Violation& v, const Origins& origins) {
  std::string where = origins.where(v.field);
  if (!origins.has(v.field)) {
    for (const auto& r : v.related) {
      if (origins.has(r)) {
        where = origins.where(r);
        break;
      }
    }
  }
  return fmt::format("{}: {}: {}", where, v.field, v.rule);
}

void validate(const Config& c, const Origins& origins) {
  const auto all = violations(c);
  if (!all.empty()) throw ConfigError(describe(all.front(), origins));
}

}  // namespace troupe::config
