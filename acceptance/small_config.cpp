#include "acceptance/small_config.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

#include "config/derived.h"

namespace troupe::acceptance {

SmallModel derive_small_model(const Config& big, const std::string& data_prefix, int max_ranks) {
  const auto& p = big.parallel();
  const int64_t ranks = int64_t(p.data()) * p.pipeline() * p.tensor();
  if (ranks > max_ranks)
    throw std::invalid_argument(fmt::format(
        "parallel: DP {} x PP {} x TP {} = {} stage ranks, more than --max-ranks {}: the acceptance ladder runs "
        "every rank of the layout as threads of this process; lower parallel.data with --set or raise --max-ranks",
        p.data(), p.pipeline(), p.tensor(), ranks, max_ranks));

  SmallModel out;
  Config& c = out.config;
  std::string& d = out.derivation;
  *c.mutable_parallel() = p;

  const int pp = p.pipeline(), tp = p.tensor();
  auto* m = c.mutable_model();
  // 2 layers a stage; under the interleaved schedule a multiple of its chunk count
  // (2 chunks: 2, 3 chunks: 3), so every chunk holds the same number.
  const int chunks = p.schedule() == ParallelConfig::INTERLEAVED_1F1B ? std::max(1, p.virtual_stages()) : 1;
  const int per_stage = chunks * ((2 + chunks - 1) / chunks);
  m->set_layers(std::min(per_stage * pp, big.model().layers()));
  m->set_heads(std::max(2, tp));
  m->set_width(16 * m->heads());
  m->set_ffn_width(0);
  m->set_vocab_size(257);
  m->set_vocab_pad_multiple(big.model().vocab_pad_multiple());
  m->set_max_positions(kSmallSeqLength);
  m->set_init_std(big.model().init_std());
  m->set_layernorm_eps(big.model().layernorm_eps());
  const auto& bm = big.model();
  m->set_tied_embeddings(bm.tied_embeddings());
  if (bm.architecture() == ModelConfig::LLAMA) {
    // The family's layers at the small size: grouped queries stay grouped (2 query
    // heads per kv head, kv heads a multiple of TP), multi-query stays multi-query.
    const int64_t big_kv = config::kv_heads(bm);
    const bool grouped = big_kv < bm.heads();
    m->set_architecture(ModelConfig::LLAMA);
    if (grouped && big_kv > 1) m->set_heads(2 * std::max(2, tp));
    m->set_width(16 * m->heads());
    m->set_kv_heads(!grouped ? m->heads() : big_kv == 1 ? 1 : m->heads() / 2);
    m->set_ffn_width(3 * m->width());
    // Heads whose size is not width / heads (model.head_dim) stay so: wider (24) or
    // narrower (8) than the small width's 16.
    if (bm.head_dim() > 0 && config::attention_width(bm) != bm.width())
      m->set_head_dim(config::attention_width(bm) > bm.width() ? 24 : 8);
    m->set_rope_theta(bm.rope_theta());
    if (bm.has_norm_eps()) m->set_norm_eps(bm.norm_eps());
  }
  d += fmt::format("- layout: DP {} x PP {} x TP {} x CP {}, {} schedule, sequence parallel {}, distributed optimizer {} "
                   "(all the config's)\n",
                   p.data(), pp, tp, p.context(), ParallelConfig::Schedule_Name(p.schedule()),
                   p.sequence_parallel() ? "on" : "off", p.distributed_optimizer() ? "on" : "off");
  d += fmt::format("- model.layers: {} (config: {}; {} per pipeline stage{}, at most the config's)\n", m->layers(),
                   big.model().layers(), per_stage,
                   chunks > 1 ? fmt::format(" in {} chunks of the interleaved schedule", chunks) : std::string());
  d += fmt::format("- model.heads: {} (config: {}; 2, or TP when TP > 2{})\n", m->heads(), big.model().heads(),
                   m->heads() > std::max(2, tp) ? ", twice that for grouped queries" : "");
  if (bm.architecture() == ModelConfig::LLAMA) {
    d += fmt::format("- model.architecture: LLAMA (the config's), kv heads {} (config: {} of {}), tied head {} "
                     "(the config's), rope_theta {:g} (the config's){}\n",
                     config::kv_heads(*m), config::kv_heads(bm), bm.heads(), bm.tied_embeddings() ? "yes" : "no",
                     bm.rope_theta(),
                     bm.has_rope_scaling() ? "; rope_scaling dropped (its original context exceeds the small run's)"
                                           : "");
    d += fmt::format("- model.width: {} (config: {}; head size {}{}), SwiGLU ffn {} (3 x width; config: {})\n",
                     m->width(), bm.width(), config::head_size(*m),
                     m->head_dim() > 0 ? fmt::format(", model.head_dim as the config's {} is {} than width / heads",
                                                     bm.head_dim(), m->head_dim() > 16 ? "wider" : "narrower")
                                       : std::string(),
                     m->ffn_width(), config::ffn_width(bm));
  } else {
    d += fmt::format("- model.width: {} (config: {}; head size 16), ffn {} (4 x width; config: {})\n", m->width(),
                     big.model().width(), 4 * m->width(), config::ffn_width(big.model()));
  }
  d += fmt::format("- model.vocab_size: 257, padded to {} (config: {}; the acceptance dataset is bytes + EOD)\n",
                   config::padded_vocab(c), big.model().vocab_size());

  auto* b = c.mutable_batch();
  const int64_t big_m = config::microbatches_per_replica(big);
  const int64_t small_m = std::min<int64_t>(big_m, std::max(2 * pp, 4));
  b->set_seq_length(kSmallSeqLength);
  b->set_micro_batch_size(std::min(big.batch().micro_batch_size(), 2));
  b->set_global_batch_size(int32_t(b->micro_batch_size() * small_m * p.data()));
  d += fmt::format("- batch.seq_length: {} (config: {})\n", kSmallSeqLength, big.batch().seq_length());
  d += fmt::format("- batch.micro_batch_size: {} (config: {}; at most 2)\n", b->micro_batch_size(),
                   big.batch().micro_batch_size());
  d += fmt::format("- microbatches per replica: {} (config: {}; at most max(2 x PP, 4))\n", small_m, big_m);
  d += fmt::format("- batch.global_batch_size: {} = {} x {} x DP {} (config: {})\n", b->global_batch_size(),
                   b->micro_batch_size(), small_m, p.data(), big.batch().global_batch_size());

  auto* o = c.mutable_optimizer();
  *o = big.optimizer();
  o->set_lr(1e-3);
  o->set_min_lr(1e-4);
  o->set_warmup_init(0);
  c.mutable_lr_schedule()->set_warmup_samples(b->global_batch_size());
  c.mutable_lr_schedule()->set_decay_style(big.lr_schedule().decay_style());
  d += fmt::format("- optimizer: lr 1e-3 -> 1e-4 (config: {:g} -> {:g}; the tolerances assume 1e-3), warmup from 0 over "
                   "the first update (Megatron's convention: update 1 applies 0, update 2 the peak), {} decay; beta1 {:g}, beta2 {:g}, eps {:g}, weight decay {:g}, clip {:g} (the "
                   "config's)\n",
                   big.optimizer().lr(), big.optimizer().min_lr(),
                   LrScheduleConfig::DecayStyle_Name(big.lr_schedule().decay_style()), o->beta1(), o->beta2(), o->eps(),
                   o->weight_decay(), o->clip_grad());

  c.mutable_training()->set_seed(big.training().seed());
  auto* data = c.mutable_data();
  data->set_prefix(data_prefix);
  data->set_tokenizer(DataConfig::BYTES);
  data->set_split("100,0,0");
  data->set_pad_to_boundary(true);
  data->set_prefetch_microbatches(big.data().prefetch_microbatches());
  d += fmt::format("- data: the acceptance dataset {} (long documents, two short documents per window, padding), "
                   "pad_to_boundary, all of it the training split\n",
                   data_prefix);
  c.mutable_device()->set_type(DeviceConfig::CPU);
  c.mutable_device()->set_threads(1);
  d += fmt::format("- device: CPU, 1 compute thread per stage; seed {} (the config's)\n", big.training().seed());
  return out;
}

Config for_run(const Config& base, const std::string& runs_root, const std::string& name, int64_t updates) {
  Config c = base;
  c.mutable_training()->set_train_samples(updates * c.batch().global_batch_size());
  c.mutable_training()->set_eval_interval(0);
  c.mutable_training()->set_eval_samples(0);
  auto* ck = c.mutable_checkpoint();
  ck->set_dir("");
  ck->set_interval_steps(0);
  ck->set_interval_seconds(0);
  ck->set_save_on_exit(false);
  ck->set_load("");
  c.mutable_supervision()->set_max_restarts(0);
  c.mutable_faults()->Clear();
  auto* l = c.mutable_logging();
  const auto dir = std::filesystem::path(runs_root) / name;
  std::filesystem::remove_all(dir);
  l->set_run_dir(dir.string());
  l->set_tensorboard(false);
  l->set_progress_bar(false);
  return c;
}

bool cpu_sized(const Config& c, std::string* why_not) {
  const auto& p = c.parallel();
  const int64_t ranks = int64_t(p.data()) * p.pipeline() * p.tensor();
  const double params = double(config::parameter_count(c));
  // fp32 weights, gradients and both Adam moments, once per data-parallel replica.
  const double state = params * 16.0 * p.data();
  const double flops = 6.0 * params * double(config::tokens_per_update(c));
  std::string why;
  if (ranks > 16) why = fmt::format("{} stage ranks (limit 16)", ranks);
  else if (state > 2e9) why = fmt::format("{:.3g} GB of counted fp32 state (limit 2 GB)", state / 1e9);
  else if (flops > 1e12) why = fmt::format("{:.3g} FLOPs per update (limit 1e12)", flops);
  if (why_not) *why_not = why;
  return why.empty();
}

}  // namespace troupe::acceptance
