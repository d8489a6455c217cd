// Global batches of packed samples for the runtime: which samples an update reads,
// how they are split over data-parallel replicas and microbatches, and the
// microbatch tensors themselves.
//
// Order: one epoch is every sample of the split once; position i of the run's
// sample order is epoch e = i / samples_per_epoch, sample
// perm_e(i % samples_per_epoch), where perm_e is a keyed permutation of
// (training.seed, split, e). The global batch at consumed_samples c is positions
// [c, c + G); replica dp gets [dp*G/DP, (dp+1)*G/DP) of it, and its microbatch j
// the rows [j*mbs, (j+1)*mbs) of that block (Megatron's assignment). Everything is
// a pure function of consumed_samples, so a resumed run reads exactly what an
// uninterrupted one would.
//
// Sample IDs name packed windows of the split: 0 .. samples_per_epoch()-1.
//
// Skipped samples (data.skip_samples, train split only): the run's order is the one
// above with every listed ID taken out of every epoch, so an epoch holds
// samples_per_epoch() - |skip| positions and the next unskipped sample takes a
// skipped one's slot. consumed_samples counts positions of that filtered order
// (samples trained on); skipped_in() names the IDs a range of it passed over, so
// consumed and skipped together account for every position of the unfiltered order.
// With no skip list the order is exactly the unfiltered one.
//
// Blends (data.blend, docs/data.md "Blends"): each dataset keeps its own order as
// above (its own sample index and epoch permutations, its own share of the skip list),
// and position i of the run's order is the taken_d(i)-th sample of dataset d's order,
// d chosen by Megatron's rule (data/blend.h). Sample IDs run over the datasets in the
// blend's order: dataset d's local ID k is offset_d + k, offset_d the samples of the
// datasets before it. A skipped sample leaves its dataset's order only, so the blend's
// choices, and every dataset's count, stay those of the weights.
//
// Thread-safe: every method is const; the blend's table grows under its own lock;
// copies share the mapped files and the index.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/batch.h"
#include "data/split.h"
#include "messages/config.pb.h"

namespace troupe::data {

// What the batch source reads of the configuration: a loader holds this piece, not the
// whole Config (InputSpec::of cuts it once per run).
struct InputSpec {
  DataConfig data;             // the datasets or blend, split, tokenizer, prefetch, skip list
  BatchConfig batch;           // micro and global batch, sequence length
  int64_t data_parallel = 1;   // parallel.data: the logical replicas a global batch is split over
  int64_t vocab_size = 0;      // model.vocab_size: every token ID must be below it
  uint64_t seed = 0;           // training.seed: keys the epoch permutations
  static InputSpec of(const Config& c);
  // Microbatches each replica reads per update: G / (micro_batch_size x parallel.data).
  int64_t microbatches_per_replica() const;
};

class BatchSource {
 public:
  // Opens the dataset cfg.data names (cfg.data.prefix; empty = the embedded default,
  // see default_corpus.h), loads or builds the cached sample index for `split`, and
  // checks it against the config: token IDs < model.vocab_size, at least one
  // sample of seq_length + 1 tokens, global_batch_size divisible by
  // micro_batch_size * parallel.data. Throws DataError naming file/field on failure.
  // The train split skips cfg.data.skip_samples; a running run passes its run state's
  // list instead (engine/run_state.h: those plus the resumed checkpoint's and each
  // rollback's), checked the same way.
  static BatchSource open(const InputSpec& in, Split split, std::span<const int64_t> skip_samples);
  // The same, from the whole Config (InputSpec::of(cfg)).
  static BatchSource open(const Config& cfg, Split split = Split::Train);
  static BatchSource open(const Config& cfg, Split split, std::span<const int64_t> skip_samples);

  // Microbatch `mb` (0 .. microbatches_per_replica-1) of replica `dp` for the global
  // batch starting at consumed_samples; global_loss_tokens filled in.
  Microbatch microbatch(int64_t consumed_samples, int dp, int mb) const;
  BatchCounts global_counts(int64_t consumed_samples) const;
  // Global batch sample IDs in assignment order (replica-major, microbatch, row).
  std::vector<int64_t> global_batch_ids(int64_t consumed_samples) const;
  int64_t epoch_of(int64_t consumed_samples) const;

  // The sample at `position` of the run's sample order (skipped samples left out).
  int64_t sample_at(int64_t position) const;
  // The skipped IDs the positions [consumed_samples, consumed_samples + count) of the
  // run's order passed over, in the unfiltered order: those after the sample at
  // consumed_samples - 1 (from the start, when consumed_samples is 0) and before the
  // sample at consumed_samples + count - 1. Empty without a skip list.
  std::vector<int64_t> skipped_in(int64_t consumed_samples, int64_t count) const;
  // The sorted skip list (data.skip_samples of the train split; empty otherwise).
  const std::vector<int64_t>& skip_samples() const;
  // What sample `id`'s window is made of, in window order: each piece's document
  // (its sequence index in the dataset's .idx), the first token taken from it, where
  // it starts in the window (input position) and how many tokens it gives.
  struct SamplePiece {
    int32_t dataset = 0;  // in the blend (0 without one)
    int64_t document = 0;
    int64_t offset = 0;
    int32_t slot = 0;
    int32_t length = 0;
  };
  std::vector<SamplePiece> pieces_of(int64_t id) const;
  // The documents of pieces_of(id), each once, in window order.
  std::vector<int64_t> documents_of(int64_t id) const;
  // Packs the given samples as the rows of one microbatch (global_loss_tokens = 0).
  Microbatch samples(std::span<const int64_t> ids) const;

  // Sample IDs are 0 .. samples_per_epoch()-1: every dataset's samples of the split.
  int64_t samples_per_epoch() const;
  int64_t documents() const;     // in this split, every dataset's
  Split split() const;
  const std::string& prefix() const;  // the first dataset's

  // The datasets: 1 without a blend. dataset_of(id) is the one sample `id` belongs to.
  int datasets() const;
  bool blended() const;
  const std::string& prefix_of(int dataset) const;
  int dataset_of(int64_t id) const;
  // Samples and non-padding input tokens each dataset gives to positions
  // [consumed_samples, consumed_samples + count) of the run's order.
  struct DatasetCount {
    int64_t samples = 0;
    int64_t tokens = 0;
  };
  std::vector<DatasetCount> dataset_counts(int64_t consumed_samples, int64_t count) const;
  // How many of positions [0, position) each dataset gave (one entry, `position`,
  // without a blend).
  std::vector<int64_t> dataset_positions(int64_t position) const;
  // The first position of the run's order at which some dataset starts its second
  // epoch: positions before it take each dataset's samples at most once.
  int64_t first_epoch_end() const;
  // Path of the cached sample index ("" when it could not be written), and whether
  // this open loaded it rather than building it.
  const std::string& index_path() const;
  bool index_from_cache() const;
  int32_t pad_id() const;

 private:
  struct Dataset;
  struct State;
  explicit BatchSource(std::shared_ptr<const State> s) : s_(std::move(s)) {}
  void fill_sample(int64_t id, int row, Microbatch& mb) const;
  // The dataset of a sample ID and the ID inside it; throws out_of_range.
  std::pair<const Dataset*, int64_t> locate(int64_t id) const;
  std::shared_ptr<const State> s_;
};

}  // namespace troupe::data
