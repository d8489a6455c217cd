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
// Thread-safe: every method is const and the object holds no mutable state; copies
// share the mapped files and the index.
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

  int64_t samples_per_epoch() const;
  int64_t documents() const;     // in this split
  Split split() const;
  const std::string& prefix() const;
  // Path of the cached sample index ("" when it could not be written), and whether
  // this open loaded it rather than building it.
  const std::string& index_path() const;
  bool index_from_cache() const;
  int32_t pad_id() const;

 private:
  struct State;
  explicit BatchSource(std::shared_ptr<const State> s) : s_(std::move(s)) {}
  void fill_sample(int64_t id, int row, Microbatch& mb) const;
  struct EpochSkips;
  EpochSkips epoch_skips(int64_t epoch) const;
  // Index in the unfiltered order (epoch * samples_per_epoch() + position in its
  // permutation) of the sample at `position` of the run's order.
  int64_t unfiltered_index(int64_t position) const;
  std::shared_ptr<const State> s_;
};

}  // namespace troupe::data
