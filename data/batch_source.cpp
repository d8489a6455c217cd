#include "data/batch_source.h"

#include <algorithm>
#include <climits>
#include <optional>
#include <stdexcept>
#include <utility>

#include "data/blend.h"
#include "data/dataset_tokenizer.h"
#include "data/default_corpus.h"
#include "data/error.h"
#include "data/hf_tokenizer.h"
#include "data/indexed_dataset.h"
#include "data/packing.h"
#include "data/random.h"
#include "data/sample_index.h"

namespace troupe::data {

// One dataset of the source: its files, its split's sample index, its part of the skip
// list and its own order (epochs of keyed permutations, the order the header describes).
struct BatchSource::Dataset {
  IndexedDataset data;
  SampleIndex index;
  SampleIndexSettings settings;
  int32_t number = 0;         // in the blend
  int64_t offset = 0;         // its first sample ID
  std::vector<int64_t> skip;  // local IDs: sorted, unique, each < index.samples()
  int64_t usable = 0;         // samples per epoch of its order: index.samples() - skip.size()

  // Where the skipped IDs sit in one epoch's permutation.
  struct EpochSkips {
    std::vector<int64_t> positions;  // sorted permutation positions of the skipped IDs
    std::vector<int64_t> ids;        // the ID at each of those positions
    // shifted[k] = positions[k] - k: the filtered position just after the k-th skip,
    // non-decreasing, so upper_bound(j) counts the skips before filtered position j.
    std::vector<int64_t> shifted;
  };

  int64_t samples() const { return index.samples(); }
  // The first dataset keeps the key of a one-dataset run, so a blend of one dataset is
  // the run of data.prefix; the others mix in their number.
  KeyedPermutation permutation(int64_t epoch) const {
    const uint64_t key = epoch_key(settings.seed, settings.split, epoch);
    return KeyedPermutation(uint64_t(samples()), number == 0 ? key : mix_seed(key, uint64_t(number)));
  }
  EpochSkips epoch_skips(int64_t epoch) const;
  // Index in the unfiltered order (epoch * samples() + position in its permutation) of
  // the sample at `position` of this dataset's order.
  int64_t unfiltered_index(int64_t position) const;
  int64_t sample_at(int64_t position) const;  // local ID
  // Local skipped IDs positions [first, first + count) of its order passed over.
  std::vector<int64_t> skipped_in(int64_t first, int64_t count) const;
};

struct BatchSource::State {
  std::vector<Dataset> datasets;
  std::optional<BlendOrder> blend;  // two datasets or more
  bool blended = false;             // the config names a blend (data.blend, valid_blend, test_blend)
  Split split = Split::Train;
  int32_t seq_length = 0;
  int64_t samples = 0;  // sample IDs: every dataset's
  int64_t global_batch = 0;
  int64_t micro_batch = 0;
  int64_t replicas = 0;
  int64_t microbatches = 0;
  int32_t pad_id = 0;
  std::vector<int64_t> skip;  // global IDs: sorted, unique, each < samples
};

namespace {

// What a split reads: each dataset's prefix, weight and train,valid,test weights.
struct SourceSpec {
  std::string prefix;
  double weight = 1;
  std::string split_weights;
};

std::vector<SourceSpec> sources_of(const DataConfig& d, Split split) {
  const auto& per_split = split == Split::Valid ? d.valid_blend() : d.test_blend();
  std::vector<SourceSpec> out;
  if (split != Split::Train && !per_split.empty()) {
    // Read whole: all the weight on this split.
    const std::string whole = split == Split::Valid ? "0,1,0" : "0,0,1";
    for (const auto& e : per_split) out.push_back({e.prefix(), e.weight(), whole});
  } else if (!d.blend().empty()) {
    for (const auto& e : d.blend()) out.push_back({e.prefix(), e.weight(), e.split().empty() ? d.split() : e.split()});
  } else {
    out.push_back({d.prefix().empty() ? ensure_default_corpus() : d.prefix(), 1, d.split()});
  }
  return out;
}

}  // namespace

InputSpec InputSpec::of(const Config& c) {
  return {c.data(), c.batch(), c.parallel().data(), c.model().vocab_size(), c.training().seed()};
}

int64_t InputSpec::microbatches_per_replica() const {
  return batch.global_batch_size() / (int64_t(batch.micro_batch_size()) * data_parallel);
}

BatchSource BatchSource::open(const Config& cfg, Split split) {
  return open(cfg, split, std::span<const int64_t>(cfg.data().skip_samples().data(),
                                                   size_t(cfg.data().skip_samples_size())));
}

BatchSource BatchSource::open(const Config& cfg, Split split, std::span<const int64_t> skip_samples) {
  return open(InputSpec::of(cfg), split, skip_samples);
}

BatchSource BatchSource::open(const InputSpec& in, Split split, std::span<const int64_t> skip_samples) {
  const auto& b = in.batch;
  const int64_t mbs = b.micro_batch_size(), dp = in.data_parallel, G = b.global_batch_size();
  if (mbs <= 0 || dp <= 0 || G <= 0 || G % (mbs * dp) != 0) {
    throw DataError("batch.global_batch_size " + std::to_string(G) +
                    " must be a positive multiple of batch.micro_batch_size (" + std::to_string(mbs) +
                    ") * parallel.data (" + std::to_string(dp) + ")");
  }
  if (b.seq_length() <= 0) {
    throw DataError("batch.seq_length " + std::to_string(b.seq_length()) + " must be positive");
  }
  const auto& d = in.data;
  if (d.prefix().empty() && d.blend().empty() && d.tokenizer() != DataConfig::BYTES) {
    throw DataError("data.tokenizer is not BYTES but data.prefix is empty: the embedded default corpus "
                    "is byte-tokenized; set data.prefix to a dataset prepared with that tokenizer");
  }

  const int64_t vocab = in.vocab_size;
  std::optional<HfTokenizerSummary> hf;
  if (d.tokenizer() == DataConfig::HF_JSON) {
    hf = read_hf_tokenizer_summary(d.tokenizer_file(), d.eod_id() >= 0 ? std::optional<int32_t>(d.eod_id()) : std::nullopt);
    if (hf->vocab_size > vocab)
      throw DataError("data.tokenizer_file " + d.tokenizer_file() + " has a vocabulary of " +
                      std::to_string(hf->vocab_size) + " IDs, more than model.vocab_size " + std::to_string(vocab));
  }

  auto s = std::make_shared<State>();
  s->split = split;
  s->seq_length = b.seq_length();
  const auto specs = sources_of(d, split);
  s->blended = !d.blend().empty() || (split == Split::Valid && !d.valid_blend().empty()) ||
               (split == Split::Test && !d.test_blend().empty());
  for (const SourceSpec& spec : specs) {
    Dataset& x = s->datasets.emplace_back();
    x.number = int32_t(s->datasets.size() - 1);
    x.offset = s->samples;
    const std::string& prefix = spec.prefix;
    x.data = IndexedDataset::open(prefix);
    if (x.data.total_tokens() == 0) {
      throw DataError("empty corpus: " + x.data.idx_path() + " holds " + std::to_string(x.data.sequences()) +
                      " sequences and no token");
    }
    if (x.number > 0 && x.data.dtype() != s->datasets.front().data.dtype()) {
      const Dataset& first = s->datasets.front();
      throw DataError("data.blend: " + x.data.idx_path() + " holds " + dtype_name(x.data.dtype()) + " tokens but " +
                      first.data.idx_path() + " holds " + dtype_name(first.data.dtype()) +
                      " tokens: the datasets of a blend were prepared with different vocabularies");
    }
    x.settings.split = split;
    x.settings.split_weights = spec.split_weights;
    x.settings.seq_length = b.seq_length();
    x.settings.pad_to_boundary = d.pad_to_boundary();
    x.settings.seed = in.seed;
    const auto ranges = split_documents(x.settings.split_weights, x.data.sequences());
    if (ranges[size_t(split)].size() == 0) {
      throw DataError("the " + std::string(split_name(split)) + " split of " + prefix + " has no documents (split \"" +
                      x.settings.split_weights + "\" over " + std::to_string(x.data.sequences()) + " documents)");
    }
    x.index = load_or_build_sample_index(x.data, x.settings);
    const SampleIndex& ix = x.index;
    if (ix.min_token_negative) {
      throw DataError(x.data.bin_path() + ": negative token ID at byte offset " +
                      std::to_string(ix.negative_token_bin_offset));
    }
    if (ix.max_token >= vocab) {
      throw DataError(x.data.bin_path() + ": token ID " + std::to_string(ix.max_token) + " at byte offset " +
                      std::to_string(ix.max_token_bin_offset) + " is >= model.vocab_size " + std::to_string(vocab) +
                      " (was the data prepared with another tokenizer?)");
    }
    if (ix.samples() == 0) {
      throw DataError("batch.seq_length " + std::to_string(b.seq_length()) + " needs windows of " +
                      std::to_string(b.seq_length() + 1) + " tokens, but the " + split_name(split) + " split of " +
                      prefix + " has only " + std::to_string(ix.split_tokens) + " tokens in " +
                      std::to_string(ix.documents.size()) + " documents: no sample can be made");
    }
    s->samples += ix.samples();
  }
  if (specs.size() > 1) {
    // Datasets prepare-data made name their tokenizer: those of a blend must agree.
    std::optional<std::pair<std::string, DatasetTokenizer>> first;
    for (const Dataset& x : s->datasets) {
      const auto t = read_dataset_tokenizer(x.data.prefix());
      if (!t) continue;
      if (!first) {
        first.emplace(x.data.prefix(), *t);
      } else if (t->vocab_size != first->second.vocab_size || t->eod != first->second.eod) {
        auto describe = [](const std::string& prefix, const DatasetTokenizer& d) {
          return prefix + " was prepared with tokenizer " + d.tokenizer + " (vocabulary " +
                 std::to_string(d.vocab_size) + ", EOD " + std::to_string(d.eod) + ", " +
                 dataset_tokenizer_path(prefix) + ")";
        };
        throw DataError("data.blend: " + describe(x.data.prefix(), *t) + " but " +
                        describe(first->first, first->second) +
                        ": the datasets of a blend must share their vocabulary and end-of-document ID");
      }
    }
    std::vector<double> weights;
    for (const SourceSpec& spec : specs) weights.push_back(spec.weight);
    s->blend.emplace(weights);
  }
  s->global_batch = G;
  s->micro_batch = mbs;
  s->replicas = dp;
  s->microbatches = in.microbatches_per_replica();
  // Padding input/target IDs are never learned; EOD keeps them inside the vocabulary:
  // 256 for the byte tokenizer, data.eod_id for a dataset tokenized elsewhere, the
  // file's EOD for a tokenizer.json, the last ID (GPT-2's <|endoftext|>) otherwise.
  s->pad_id = d.tokenizer() == DataConfig::BYTES  ? 256
              : d.tokenizer() == DataConfig::NONE ? d.eod_id()
              : hf                                ? hf->eod
                                                  : int32_t(vocab - 1);
  if (s->pad_id >= vocab) s->pad_id = int32_t(vocab - 1);
  const std::string where = s->blended ? "the blend's " + std::to_string(specs.size()) + " datasets"
                                       : specs.front().prefix;
  if (split == Split::Train) {
    s->skip.assign(skip_samples.begin(), skip_samples.end());
    std::sort(s->skip.begin(), s->skip.end());
    s->skip.erase(std::unique(s->skip.begin(), s->skip.end()), s->skip.end());
    if (!s->skip.empty() && (s->skip.front() < 0 || s->skip.back() >= s->samples)) {
      const int64_t bad = s->skip.front() < 0 ? s->skip.front() : s->skip.back();
      throw DataError("data.skip_samples: sample ID " + std::to_string(bad) + " is outside the " +
                      std::to_string(s->samples) + " samples [0, " + std::to_string(s->samples) +
                      ") of the train split of " + where);
    }
  }
  for (Dataset& x : s->datasets) {
    for (const int64_t id : s->skip)
      if (id >= x.offset && id < x.offset + x.samples()) x.skip.push_back(id - x.offset);
    if (int64_t(x.skip.size()) == x.samples()) {
      throw DataError("data.skip_samples skips all " + std::to_string(x.samples()) + " samples of the train split of " +
                      x.data.prefix() +
                      (s->blended ? " (sample IDs " + std::to_string(x.offset) + " to " +
                                        std::to_string(x.offset + x.samples() - 1) + " of the blend)"
                                  : std::string()) +
                      ": nothing is left to train on");
    }
    x.usable = x.samples() - int64_t(x.skip.size());
  }
  return BatchSource(std::move(s));
}

BatchSource::Dataset::EpochSkips BatchSource::Dataset::epoch_skips(int64_t epoch) const {
  const KeyedPermutation perm = permutation(epoch);
  std::vector<std::pair<int64_t, int64_t>> at;  // (position, id)
  at.reserve(skip.size());
  for (const int64_t id : skip) at.emplace_back(int64_t(perm.inverse(uint64_t(id))), id);
  std::sort(at.begin(), at.end());
  EpochSkips e;
  for (size_t k = 0; k < at.size(); ++k) {
    e.positions.push_back(at[k].first);
    e.ids.push_back(at[k].second);
    e.shifted.push_back(at[k].first - int64_t(k));
  }
  return e;
}

int64_t BatchSource::Dataset::unfiltered_index(int64_t position) const {
  if (position < 0) throw std::out_of_range("data: negative sample position " + std::to_string(position));
  if (skip.empty()) return position;
  const int64_t epoch = position / usable, j = position % usable;
  const EpochSkips e = epoch_skips(epoch);
  // The j-th unskipped position: j plus the skips at or before it.
  const auto before = std::upper_bound(e.shifted.begin(), e.shifted.end(), j) - e.shifted.begin();
  return epoch * samples() + j + int64_t(before);
}

int64_t BatchSource::Dataset::sample_at(int64_t position) const {
  const int64_t n = samples();
  const int64_t raw = unfiltered_index(position);
  return int64_t(permutation(raw / n)(uint64_t(raw % n)));
}

std::vector<int64_t> BatchSource::Dataset::skipped_in(int64_t first, int64_t count) const {
  std::vector<int64_t> out;
  if (skip.empty() || count <= 0) return out;
  const int64_t n = samples();
  const int64_t lo = first == 0 ? 0 : unfiltered_index(first - 1) + 1;
  const int64_t hi = unfiltered_index(first + count - 1);  // inclusive
  for (int64_t epoch = lo / n; epoch <= hi / n; ++epoch) {
    const EpochSkips e = epoch_skips(epoch);
    for (size_t k = 0; k < e.positions.size(); ++k) {
      const int64_t raw = epoch * n + e.positions[k];
      if (raw >= lo && raw <= hi) out.push_back(e.ids[k]);
    }
  }
  return out;
}

int64_t BatchSource::sample_at(int64_t position) const {
  if (!s_->blend) return s_->datasets.front().sample_at(position);
  const BlendOrder::Choice c = s_->blend->choice_at(position);
  const Dataset& x = s_->datasets[size_t(c.dataset)];
  return x.offset + x.sample_at(c.index);
}

std::vector<int64_t> BatchSource::dataset_positions(int64_t position) const {
  if (!s_->blend) return {position};
  return s_->blend->taken_before(position);
}

std::vector<int64_t> BatchSource::skipped_in(int64_t consumed_samples, int64_t count) const {
  std::vector<int64_t> out;
  if (s_->skip.empty() || count <= 0) return out;
  // Dataset by dataset, in the blend's order: each its own positions of the range.
  const auto lo = dataset_positions(consumed_samples), hi = dataset_positions(consumed_samples + count);
  for (const Dataset& x : s_->datasets)
    for (const int64_t id : x.skipped_in(lo[size_t(x.number)], hi[size_t(x.number)] - lo[size_t(x.number)]))
      out.push_back(x.offset + id);
  return out;
}

const std::vector<int64_t>& BatchSource::skip_samples() const { return s_->skip; }

int64_t BatchSource::epoch_of(int64_t consumed_samples) const {
  // With a blend: the most epochs any dataset has completed.
  const auto at = dataset_positions(consumed_samples);
  int64_t epoch = 0;
  for (const Dataset& x : s_->datasets) epoch = std::max(epoch, at[size_t(x.number)] / x.usable);
  return epoch;
}

int64_t BatchSource::first_epoch_end() const {
  if (!s_->blend) return s_->datasets.front().usable;
  int64_t end = INT64_MAX;
  for (const Dataset& x : s_->datasets) end = std::min(end, s_->blend->first_position_beyond(x.number, x.usable));
  return end;
}

std::vector<BatchSource::DatasetCount> BatchSource::dataset_counts(int64_t consumed_samples, int64_t count) const {
  std::vector<DatasetCount> out(s_->datasets.size());
  for (int64_t k = 0; k < count; ++k) {
    const auto [x, local] = locate(sample_at(consumed_samples + k));
    DatasetCount& c = out[size_t(x->number)];
    ++c.samples;
    c.tokens += s_->seq_length - x->index.padding_tokens[size_t(local)];
  }
  return out;
}

std::pair<const BatchSource::Dataset*, int64_t> BatchSource::locate(int64_t id) const {
  if (id < 0 || id >= s_->samples)
    throw std::out_of_range("data: sample ID " + std::to_string(id) + " outside [0, " + std::to_string(s_->samples) +
                            ")");
  const auto& ds = s_->datasets;
  auto it = std::upper_bound(ds.begin(), ds.end(), id, [](int64_t v, const Dataset& x) { return v < x.offset; });
  const Dataset& x = *(it - 1);
  return {&x, id - x.offset};
}

int BatchSource::dataset_of(int64_t id) const { return locate(id).first->number; }
int BatchSource::datasets() const { return int(s_->datasets.size()); }
bool BatchSource::blended() const { return s_->blended; }
const std::string& BatchSource::prefix_of(int dataset) const {
  return s_->datasets.at(size_t(dataset)).data.prefix();
}

std::vector<int64_t> BatchSource::global_batch_ids(int64_t consumed_samples) const {
  std::vector<int64_t> ids(size_t(s_->global_batch));
  for (int64_t k = 0; k < s_->global_batch; ++k) ids[size_t(k)] = sample_at(consumed_samples + k);
  return ids;
}

BatchCounts BatchSource::global_counts(int64_t consumed_samples) const {
  BatchCounts c;
  c.samples = s_->global_batch;
  c.input_tokens = s_->global_batch * s_->seq_length;
  for (int64_t k = 0; k < s_->global_batch; ++k) {
    const auto [x, id] = locate(sample_at(consumed_samples + k));
    c.loss_tokens += x->index.loss_tokens[size_t(id)];
    c.padding_tokens += x->index.padding_tokens[size_t(id)];
  }
  return c;
}

namespace {

// The window of local sample `id` of dataset x.
Window window_of(const SampleIndex& x, const IndexedDataset& data, const SampleIndexSettings& settings, int64_t id) {
  auto length_of = [&](int64_t pos) { return int64_t(data.sequence_length(x.doc_order[size_t(pos)])); };
  Window w;
  w.pieces.reserve(8);
  next_window(length_of, int64_t(x.doc_order.size()), {x.start_doc[size_t(id)], x.start_offset[size_t(id)]},
              settings.seq_length, settings.pad_to_boundary, w);
  return w;
}

}  // namespace

void BatchSource::fill_sample(int64_t id, int row, Microbatch& mb) const {
  const auto [x, local] = locate(id);
  const Window w = window_of(x->index, x->data, x->settings, local);
  std::vector<int32_t> window(size_t(s_->seq_length) + 1);
  for (const Piece& p : w.pieces) {
    x->data.read(x->index.doc_order[size_t(p.doc)], p.offset, p.length, window.data() + p.slot);
  }
  fill_row(w, window.data(), s_->pad_id, row, mb);
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
  const auto [x, local] = locate(id);
  const Window w = window_of(x->index, x->data, x->settings, local);
  std::vector<SamplePiece> pieces;
  for (const Piece& p : w.pieces)
    pieces.push_back({x->number, x->index.doc_order[size_t(p.doc)], p.offset, p.slot, p.length});
  return pieces;
}

Microbatch BatchSource::samples(std::span<const int64_t> ids) const {
  Microbatch mb;
  mb.batch = int32_t(ids.size());
  mb.seq = s_->seq_length;
  const size_t n = ids.size() * size_t(mb.seq);
  mb.tokens.resize(n);
  mb.targets.resize(n);
  mb.positions.resize(n);
  mb.segments.resize(n);
  mb.loss_mask.resize(n);
  mb.sample_ids.resize(ids.size());
  for (size_t r = 0; r < ids.size(); ++r) {
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

int64_t BatchSource::samples_per_epoch() const { return s_->samples; }
int64_t BatchSource::documents() const {
  int64_t n = 0;
  for (const Dataset& x : s_->datasets) n += x.index.documents.size();
  return n;
}
Split BatchSource::split() const { return s_->split; }
const std::string& BatchSource::prefix() const { return s_->datasets.front().data.prefix(); }
const std::string& BatchSource::index_path() const { return s_->datasets.front().index.cache_path; }
bool BatchSource::index_from_cache() const { return s_->datasets.front().index.from_cache; }
int32_t BatchSource::pad_id() const { return s_->pad_id; }

}  // namespace troupe::data
