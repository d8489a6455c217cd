#include "data/batch_source.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <utility>

#include "config/derived.h"
#include "data/default_corpus.h"
#include "data/error.h"
#include "data/hf_tokenizer.h"
#include "data/indexed_dataset.h"
#include "data/packing.h"
#include "data/random.h"
#include "data/sample_index.h"

namespace troupe::data {

struct BatchSource::State {
  IndexedDataset data;
  SampleIndex index;
  SampleIndexSettings settings;
  int64_t global_batch = 0;
  int64_t micro_batch = 0;
  int64_t replicas = 0;
  int64_t microbatches = 0;
  int32_t pad_id = 0;
  std::vector<int64_t> skip;  // sorted, unique, each < index.samples()
  int64_t usable = 0;         // samples per epoch of the run's order: index.samples() - skip.size()
};

// Where the skipped IDs sit in one epoch's permutation.
struct BatchSource::EpochSkips {
  std::vector<int64_t> positions;  // sorted permutation positions of the skipped IDs
  std::vector<int64_t> ids;        // the ID at each of those positions
  // shifted[k] = positions[k] - k: the filtered position just after the k-th skip,
  // non-decreasing, so upper_bound(j) counts the skips before filtered position j.
  std::vector<int64_t> shifted;
};

BatchSource BatchSource::open(const Config& cfg, Split split) {
  return open(cfg, split, std::span<const int64_t>(cfg.data().skip_samples().data(),
                                                   size_t(cfg.data().skip_samples_size())));
}

BatchSource BatchSource::open(const Config& cfg, Split split, std::span<const int64_t> skip_samples) {
  const auto& b = cfg.batch();
  const int64_t mbs = b.micro_batch_size(), dp = cfg.parallel().data(), G = b.global_batch_size();
  if (mbs <= 0 || dp <= 0 || G <= 0 || G % (mbs * dp) != 0) {
    throw DataError("batch.global_batch_size " + std::to_string(G) +
                    " must be a positive multiple of batch.micro_batch_size (" + std::to_string(mbs) +
                    ") * parallel.data (" + std::to_string(dp) + ")");
  }
  if (b.seq_length() <= 0) {
    throw DataError("batch.seq_length " + std::to_string(b.seq_length()) + " must be positive");
  }

  auto s = std::make_shared<State>();
  if (cfg.data().prefix().empty() && cfg.data().tokenizer() != DataConfig::BYTES) {
    throw DataError("data.tokenizer is not BYTES but data.prefix is empty: the embedded default corpus "
                    "is byte-tokenized; set data.prefix to a dataset prepared with that tokenizer");
  }
  const std::string prefix = cfg.data().prefix().empty() ? ensure_default_corpus() : cfg.data().prefix();
  s->data = IndexedDataset::open(prefix);
  if (s->data.total_tokens() == 0) {
    throw DataError("empty corpus: " + s->data.idx_path() + " holds " +
                    std::to_string(s->data.sequences()) + " sequences and no token");
  }
  s->settings.split = split;
  s->settings.split_weights = cfg.data().split();
  s->settings.seq_length = b.seq_length();
  s->settings.pad_to_boundary = cfg.data().pad_to_boundary();
  s->settings.seed = cfg.training().seed();
  const auto ranges = split_documents(s->settings.split_weights, s->data.sequences());
  if (ranges[size_t(split)].size() == 0) {
    throw DataError("the " + std::string(split_name(split)) + " split of " + prefix +
                    " has no documents (data.split \"" + s->settings.split_weights + "\" over " +
                    std::to_string(s->data.sequences()) + " documents)");
  }
  s->index = load_or_build_sample_index(s->data, s->settings);
  const SampleIndex& x = s->index;

  const int64_t vocab = cfg.model().vocab_size();
  std::optional<HfTokenizerSummary> hf;
  if (cfg.data().tokenizer() == DataConfig::HF_JSON) {
    const auto& d = cfg.data();
    hf = read_hf_tokenizer_summary(d.tokenizer_file(), d.eod_id() >= 0 ? std::optional<int32_t>(d.eod_id()) : std::nullopt);
    if (hf->vocab_size > vocab)
      throw DataError("data.tokenizer_file " + d.tokenizer_file() + " has a vocabulary of " +
                      std::to_string(hf->vocab_size) + " IDs, more than model.vocab_size " + std::to_string(vocab));
  }
  if (x.min_token_negative) {
    throw DataError(s->data.bin_path() + ": negative token ID at byte offset " +
                    std::to_string(x.negative_token_bin_offset));
  }
  if (x.max_token >= vocab) {
    throw DataError(s->data.bin_path() + ": token ID " + std::to_string(x.max_token) +
                    " at byte offset " + std::to_string(x.max_token_bin_offset) +
                    " is >= model.vocab_size " + std::to_string(vocab) +
                    " (was the data prepared with another tokenizer?)");
  }
  if (x.samples() == 0) {
    throw DataError("batch.seq_length " + std::to_string(b.seq_length()) + " needs windows of " +
                    std::to_string(b.seq_length() + 1) + " tokens, but the " + split_name(split) +
                    " split of " + prefix + " has only " + std::to_string(x.split_tokens) +
                    " tokens in " + std::to_string(x.documents.size()) +
                    " documents: no sample can be made");
  }
  s->global_batch = G;
  s->micro_batch = mbs;
  s->replicas = dp;
  s->microbatches = config::microbatches_per_replica(cfg);
  // Padding input/target IDs are never learned; EOD keeps them inside the vocabulary:
  // 256 for the byte tokenizer, data.eod_id for a dataset tokenized elsewhere, the
  // file's EOD for a tokenizer.json, the last ID (GPT-2's <|endoftext|>) otherwise.
  s->pad_id = cfg.data().tokenizer() == DataConfig::BYTES  ? 256
              : cfg.data().tokenizer() == DataConfig::NONE ? cfg.data().eod_id()
              : hf                                         ? hf->eod
                                                           : int32_t(vocab - 1);
  if (s->pad_id >= vocab) s->pad_id = int32_t(vocab - 1);
  if (split == Split::Train) {
    s->skip.assign(skip_samples.begin(), skip_samples.end());
    std::sort(s->skip.begin(), s->skip.end());
    s->skip.erase(std::unique(s->skip.begin(), s->skip.end()), s->skip.end());
    if (!s->skip.empty() && (s->skip.front() < 0 || s->skip.back() >= x.samples())) {
      const int64_t bad = s->skip.front() < 0 ? s->skip.front() : s->skip.back();
      throw DataError("data.skip_samples: sample ID " + std::to_string(bad) + " is outside the " +
                      std::to_string(x.samples()) + " samples [0, " + std::to_string(x.samples()) +
                      ") of the train split of " + prefix);
    }
    if (int64_t(s->skip.size()) == x.samples()) {
      throw DataError("data.skip_samples skips all " + std::to_string(x.samples()) +
                      " samples of the train split of " + prefix + ": nothing is left to train on");
    }
  }
  s->usable = x.samples() - int64_t(s->skip.size());
  return BatchSource(std::move(s));
}

BatchSource::EpochSkips BatchSource::epoch_skips(int64_t epoch) const {
  const int64_t n = s_->index.samples();
  const KeyedPermutation perm(uint64_t(n), epoch_key(s_->settings.seed, s_->settings.split, epoch));
  std::vector<std::pair<int64_t, int64_t>> at;  // (position, id)
  at.reserve(s_->skip.size());
  for (const int64_t id : s_->skip) at.emplace_back(int64_t(perm.inverse(uint64_t(id))), id);
  std::sort(at.begin(), at.end());
  EpochSkips e;
  for (size_t k = 0; k < at.size(); ++k) {
    e.positions.push_back(at[k].first);
    e.ids.push_back(at[k].second);
    e.shifted.push_back(at[k].first - int64_t(k));
  }
  return e;
}

int64_t BatchSource::unfiltered_index(int64_t position) const {
  if (position < 0) throw std::out_of_range("data: negative sample position " + std::to_string(position));
  const int64_t n = s_->index.samples();
  if (s_->skip.empty()) return position;
  const int64_t epoch = position / s_->usable, j = position % s_->usable;
  const EpochSkips e = epoch_skips(epoch);
  // The j-th unskipped position: j plus the skips at or before it.
  const auto before = std::upper_bound(e.shifted.begin(), e.shifted.end(), j) - e.shifted.begin();
  return epoch * n + j + int64_t(before);
}

int64_t BatchSource::sample_at(int64_t position) const {
  const int64_t n = s_->index.samples();
  const int64_t raw = unfiltered_index(position);
  const int64_t epoch = raw / n;
  const KeyedPermutation perm(uint64_t(n), epoch_key(s_->settings.seed, s_->settings.split, epoch));
  return int64_t(perm(uint64_t(raw % n)));
}

std::vector<int64_t> BatchSource::skipped_in(int64_t consumed_samples, int64_t count) const {
  std::vector<int64_t> out;
  if (s_->skip.empty() || count <= 0) return out;
  const int64_t n = s_->index.samples();
  const int64_t lo = consumed_samples == 0 ? 0 : unfiltered_index(consumed_samples - 1) + 1;
  const int64_t hi = unfiltered_index(consumed_samples + count - 1);  // inclusive
  for (int64_t epoch = lo / n; epoch <= hi / n; ++epoch) {
    const EpochSkips e = epoch_skips(epoch);
    for (size_t k = 0; k < e.positions.size(); ++k) {
      const int64_t raw = epoch * n + e.positions[k];
      if (raw >= lo && raw <= hi) out.push_back(e.ids[k]);
    }
  }
  return out;
}

const std::vector<int64_t>& BatchSource::skip_samples() const { return s_->skip; }

int64_t BatchSource::epoch_of(int64_t consumed_samples) const {
  return consumed_samples / s_->usable;
}

std::vector<int64_t> BatchSource::global_batch_ids(int64_t consumed_samples) const {
  std::vector<int64_t> ids(size_t(s_->global_batch));
  for (int64_t k = 0; k < s_->global_batch; ++k) ids[size_t(k)] = sample_at(consumed_samples + k);
  return ids;
}

BatchCounts BatchSource::global_counts(int64_t consumed_samples) const {
  BatchCounts c;
  c.samples = s_->global_batch;
  c.input_tokens = s_->global_batch * s_->settings.seq_length;
  for (int64_t k = 0; k < s_->global_batch; ++k) {
    const int64_t id = sample_at(consumed_samples + k);
    c.loss_tokens += s_->index.loss_tokens[size_t(id)];
    c.padding_tokens += s_->index.padding_tokens[size_t(id)];
  }
  return c;
}

void BatchSource::fill_sample(int64_t id, int row, Microbatch& mb) const {
  const State& s = *s_;
  const SampleIndex& x = s.index;
  auto length_of = [&](int64_t pos) { return int64_t(s.data.sequence_length(x.doc_order[size_t(pos)])); };
  Window w;
  w.pieces.reserve(8);
  next_window(length_of, int64_t(x.doc_order.size()), {x.start_doc[size_t(id)], x.start_offset[size_t(id)]},
              s.settings.seq_length, s.settings.pad_to_boundary, w);
  std::vector<int32_t> window(size_t(s.settings.seq_length) + 1);
  for (const Piece& p : w.pieces) {
    s.data.read(x.doc_order[size_t(p.doc)], p.offset, p.length, window.data() + p.slot);
  }
  fill_row(w, window.data(), s.pad_id, row, mb);
  mb.sample_ids[size_t(row)] = id;
  mb.loss_tokens += w.loss_tokens;
  mb.padding_tokens += w.padding_tokens;
}

std::vector<int64_t> BatchSource::documents_of(int64_t id) const {
  std::vector<int64_t> docs;
  for (const SamplePiece& p : pieces_of(id))
    if (docs.empty() || docs.back() != p.document) docs.push_back(p.document);
  return docs;
}

std::vector<BatchSource::SamplePiece> BatchSource::pieces_of(int64_t id) const {
  const State& s = *s_;
  const SampleIndex& x = s.index;
  if (id < 0 || id >= x.samples())
    throw std::out_of_range("data: sample ID " + std::to_string(id) + " outside [0, " +
                            std::to_string(x.samples()) + ")");
  auto length_of = [&](int64_t pos) { return int64_t(s.data.sequence_length(x.doc_order[size_t(pos)])); };
  Window w;
  next_window(length_of, int64_t(x.doc_order.size()), {x.start_doc[size_t(id)], x.start_offset[size_t(id)]},
              s.settings.seq_length, s.settings.pad_to_boundary, w);
  std::vector<SamplePiece> pieces;
  for (const Piece& p : w.pieces) pieces.push_back({x.doc_order[size_t(p.doc)], p.offset, p.slot, p.length});
  return pieces;
}

Microbatch BatchSource::samples(std::span<const int64_t> ids) const {
  Microbatch mb;
  mb.batch = int32_t(ids.size());
  mb.seq = s_->settings.seq_length;
  const size_t n = ids.size() * size_t(mb.seq);
  mb.tokens.resize(n);
  mb.targets.resize(n);
  mb.positions.resize(n);
  mb.segments.resize(n);
  mb.loss_mask.resize(n);
  mb.sample_ids.resize(ids.size());
  for (size_t r = 0; r < ids.size(); ++r) {
    if (ids[r] < 0 || ids[r] >= s_->index.samples()) {
      throw std::out_of_range("data: sample ID " + std::to_string(ids[r]) + " outside [0, " +
                              std::to_string(s_->index.samples()) + ")");
    }
    fill_sample(ids[r], int(r), mb);
  }
  return mb;
}

Microbatch BatchSource::microbatch(int64_t consumed_samples, int dp, int mb) const {
  const State& s = *s_;
  if (consumed_samples < 0 || dp < 0 || dp >= s.replicas || mb < 0 || mb >= s.microbatches) {
    throw std::out_of_range("data: microbatch(consumed_samples " + std::to_string(consumed_samples) +
                            ", dp " + std::to_string(dp) + ", mb " + std::to_string(mb) +
                            ") outside " + std::to_string(s.replicas) + " replicas x " +
                            std::to_string(s.microbatches) + " microbatches");
  }
  const int64_t first = consumed_samples + dp * (s.global_batch / s.replicas) + mb * s.micro_batch;
  std::vector<int64_t> ids(size_t(s.micro_batch));
  for (int64_t r = 0; r < s.micro_batch; ++r) ids[size_t(r)] = sample_at(first + r);
  Microbatch out = samples(ids);
  out.first_slot = first;
  out.global_loss_tokens = global_counts(consumed_samples).loss_tokens;
  return out;
}

int64_t BatchSource::samples_per_epoch() const { return s_->index.samples(); }
int64_t BatchSource::documents() const { return s_->index.documents.size(); }
Split BatchSource::split() const { return s_->settings.split; }
const std::string& BatchSource::prefix() const { return s_->data.prefix(); }
const std::string& BatchSource::index_path() const { return s_->index.cache_path; }
bool BatchSource::index_from_cache() const { return s_->index.from_cache; }
int32_t BatchSource::pad_id() const { return s_->pad_id; }

}  // namespace troupe::data
