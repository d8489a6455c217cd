// BatchSource: deterministic epoch orders, resume equivalence, replica/microbatch
// assignment, the validation split, the cached index, counts, and bad-input errors.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>
#include <thread>

#include "config/derived.h"
#include "data/batch_source.h"
#include "data/default_corpus.h"
#include "data/error.h"
#include "data/random.h"
#include "data/sample_index.h"
#include "test/data/helpers.h"

using namespace troupe;
using namespace troupe::data;
using namespace troupe::data::testing;

namespace {

// 300 documents of 5..40 tokens; document d's tokens are (d + k) % 250, then EOD.
std::vector<std::vector<int32_t>> make_docs(int n = 300) {
  std::vector<std::vector<int32_t>> docs;
  SplitMix64 rng(42);
  for (int d = 0; d < n; ++d) {
    std::vector<int32_t> doc;
    const int len = 4 + int(rng.below(36));
    for (int k = 0; k < len; ++k) doc.push_back((d + k) % 250);
    doc.push_back(256);
    docs.push_back(doc);
  }
  return docs;
}

std::string error_of(const Config& c, Split s = Split::Train) {
  try {
    BatchSource::open(c, s);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("keyed permutation is a bijection for every size") {
  for (uint64_t n : {1ull, 2ull, 3ull, 7ull, 64ull, 100ull, 1000ull, 4097ull}) {
    const KeyedPermutation p(n, 12345);
    std::vector<int> seen(n, 0);
    for (uint64_t i = 0; i < n; ++i) ++seen[p(i)];
    CHECK(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; }));
  }
  const KeyedPermutation a(1000, 1), b(1000, 2);
  int same = 0, fixed = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    same += a(i) == b(i);
    fixed += a(i) == i;
  }
  CHECK(same < 20);   // different keys, different orders (about 1 expected)
  CHECK(fixed < 20);  // and not the identity
}

TEST_CASE("keyed permutation inverse undoes it") {
  for (uint64_t n : {1ull, 2ull, 3ull, 7ull, 100ull, 4097ull}) {
    const KeyedPermutation p(n, 777);
    for (uint64_t i = 0; i < n; ++i) REQUIRE(p.inverse(p(i)) == i);
  }
}

TEST_CASE("split documents follow Megatron's rounding") {
  auto r = split_documents("98,2,0", 1000);
  CHECK(r[0].begin == 0);
  CHECK(r[0].end == 980);
  CHECK(r[1].end == 1000);
  CHECK(r[2].size() == 0);
  r = split_documents("1/1/1", 10);  // 3.33 each: round -> 3,3,3, shifted so the last ends at 10
  CHECK(r[0].end == 4);
  CHECK(r[1].end == 7);
  CHECK(r[2].end == 10);
  r = split_documents("95", 7);
  CHECK(r[0].size() == 7);
  CHECK_THROWS_WITH_AS(split_documents("98,x,0", 10), doctest::Contains("data.split \"98,x,0\": 'x' is not a number"), DataError);
  CHECK_THROWS_WITH_AS(split_documents("0,0,0", 10), doctest::Contains("sum to 0"), DataError);
  CHECK_THROWS_WITH_AS(split_documents("1,2,3,4", 10), doctest::Contains("more than three"), DataError);
}

TEST_CASE("epochs: every sample once per epoch, deterministic, reshuffled each epoch") {
  ScratchDir dir;
  write_dataset(dir / "c", make_docs());
  const Config cfg = small_config(dir / "c", 16, 2, 2, 8);
  const BatchSource src = BatchSource::open(cfg);
  const int64_t n = src.samples_per_epoch();
  REQUIRE(n > 100);
  std::vector<int64_t> e0, e1;
  for (int64_t i = 0; i < n; ++i) e0.push_back(src.sample_at(i));
  for (int64_t i = 0; i < n; ++i) e1.push_back(src.sample_at(n + i));
  std::vector<int64_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  auto sorted = [](std::vector<int64_t> v) { std::sort(v.begin(), v.end()); return v; };
  CHECK(sorted(e0) == all);
  CHECK(sorted(e1) == all);
  CHECK(e0 != e1);
  CHECK(e0 != all);
  CHECK(src.epoch_of(n - 1) == 0);
  CHECK(src.epoch_of(n) == 1);
  CHECK(src.epoch_of(5 * n + 3) == 5);

  const BatchSource again = BatchSource::open(cfg);
  CHECK(again.index_from_cache());
  for (int64_t i = 0; i < 2 * n; i += 7) CHECK(again.sample_at(i) == src.sample_at(i));

  Config other = cfg;
  other.mutable_training()->set_seed(8);
  const BatchSource reseeded = BatchSource::open(other);
  int same = 0;
  for (int64_t i = 0; i < n; ++i) same += reseeded.sample_at(i) == src.sample_at(i);
  CHECK(same < n / 10);
}

TEST_CASE("resume from any consumed_samples reads what an uninterrupted run reads") {
  ScratchDir dir;
  write_dataset(dir / "c", make_docs());
  const Config cfg = small_config(dir / "c", 16, 2, 2, 8);
  const BatchSource run = BatchSource::open(cfg);
  const int64_t n = run.samples_per_epoch();
  // The uninterrupted run: batches at 0, 8, 16, ... across three epochs.
  std::vector<std::vector<int64_t>> ids;
  std::vector<Microbatch> mbs;
  for (int64_t c = 0; c < 3 * n; c += 8) {
    ids.push_back(run.global_batch_ids(c));
    mbs.push_back(run.microbatch(c, 1, 1));
  }
  for (int64_t resume : {int64_t(8), int64_t(64), (n / 8) * 8, (n / 8 + 1) * 8, 2 * ((n / 8) * 8)}) {
    const BatchSource resumed = BatchSource::open(cfg);  // a fresh process's view
    for (int64_t c = resume, k = resume / 8; c < 3 * n; c += 8, ++k) {
      REQUIRE(resumed.global_batch_ids(c) == ids[size_t(k)]);
      const Microbatch mb = resumed.microbatch(c, 1, 1);
      REQUIRE(mb.tokens == mbs[size_t(k)].tokens);
      REQUIRE(mb.loss_mask == mbs[size_t(k)].loss_mask);
    }
  }
}

TEST_CASE("data.skip_samples: the next unskipped sample takes the slot, in every epoch") {
  ScratchDir dir;
  write_dataset(dir / "c", make_docs());
  const Config cfg = small_config(dir / "c", 16, 2, 2, 8);
  const BatchSource plain = BatchSource::open(cfg);
  const int64_t n = plain.samples_per_epoch();
  REQUIRE(n > 100);
  // Skip the samples at positions 0, 5, 6 and n - 1 of epoch 0 (the first, two
  // neighbours, and the last one of the epoch).
  const std::vector<int64_t> skip = {plain.sample_at(6), plain.sample_at(0), plain.sample_at(5), plain.sample_at(n - 1)};
  Config skipping = cfg;
  for (const int64_t id : skip) skipping.mutable_data()->add_skip_samples(id);
  const BatchSource src = BatchSource::open(skipping);
  const int64_t u = n - 4;  // positions per epoch of the filtered order
  std::vector<int64_t> sorted_skip = skip;
  std::sort(sorted_skip.begin(), sorted_skip.end());
  CHECK(src.skip_samples() == sorted_skip);

  // Epoch 0 is the unfiltered epoch 0 with those four left out, order kept.
  std::vector<int64_t> want;
  for (int64_t i = 0; i < n; ++i)
    if (i != 0 && i != 5 && i != 6 && i != n - 1) want.push_back(plain.sample_at(i));
  std::vector<int64_t> got;
  for (int64_t i = 0; i < u; ++i) got.push_back(src.sample_at(i));
  CHECK(got == want);
  // Epoch 1 (filtered positions u .. 2u-1) is the unfiltered epoch 1 without the four IDs.
  want.clear();
  for (int64_t i = n; i < 2 * n; ++i)
    if (std::find(skip.begin(), skip.end(), plain.sample_at(i)) == skip.end()) want.push_back(plain.sample_at(i));
  got.clear();
  for (int64_t i = u; i < 2 * u; ++i) got.push_back(src.sample_at(i));
  CHECK(got == want);
  CHECK(src.epoch_of(u - 1) == 0);
  CHECK(src.epoch_of(u) == 1);

  // The global batch at 0 starts at unfiltered position 1 and runs to 11 (0, 5 and 6 passed over).
  CHECK(src.global_batch_ids(0) == std::vector<int64_t>{plain.sample_at(1), plain.sample_at(2), plain.sample_at(3),
                                                         plain.sample_at(4), plain.sample_at(7), plain.sample_at(8),
                                                         plain.sample_at(9), plain.sample_at(10)});
  CHECK(src.skipped_in(0, 8) == std::vector<int64_t>{skip[1], skip[2], skip[0]});  // unfiltered order: 0, 5, 6
  CHECK(src.skipped_in(8, 8).empty());
  // The audit: consumed and skipped together cover every unfiltered position exactly once.
  std::vector<int64_t> consumed_and_skipped;
  for (int64_t c = 0; c + 8 <= 3 * u; c += 8) {
    for (const int64_t id : src.global_batch_ids(c)) consumed_and_skipped.push_back(id);
    for (const int64_t id : src.skipped_in(c, 8)) consumed_and_skipped.push_back(id);
  }
  std::sort(consumed_and_skipped.begin(), consumed_and_skipped.end());
  // Positions covered: up to the last consumed one; each ID n'th-fold per whole epoch passed.
  std::map<int64_t, int> times;
  for (const int64_t id : consumed_and_skipped) ++times[id];
  const int64_t batches = (3 * u) / 8, last_raw = [&] {
    // the unfiltered index of the last consumed position
    int64_t raw = -1, pos = -1;
    while (pos < batches * 8 - 1) {
      ++raw;
      if (std::find(skip.begin(), skip.end(), plain.sample_at(raw)) == skip.end()) ++pos;
    }
    return raw;
  }();
  std::map<int64_t, int> want_times;
  for (int64_t raw = 0; raw <= last_raw; ++raw) ++want_times[plain.sample_at(raw)];
  CHECK(times == want_times);

  // Microbatch rows follow the filtered order; counts too.
  const Microbatch mb = src.microbatch(0, 1, 0);
  CHECK(mb.sample_ids == std::vector<int64_t>{plain.sample_at(7), plain.sample_at(8)});
  int64_t loss_tokens = 0;
  for (const int64_t id : src.global_batch_ids(0)) loss_tokens += plain.samples(std::vector<int64_t>{id}).loss_tokens;
  CHECK(src.global_counts(0).loss_tokens == loss_tokens);
  CHECK(mb.global_loss_tokens == loss_tokens);

  // A run skipping nothing reads exactly the unfiltered order.
  CHECK(plain.skipped_in(0, 8).empty());
  CHECK(plain.skip_samples().empty());

  // Out of range, and everything skipped: one error each, naming the field.
  Config too_big = cfg;
  too_big.mutable_data()->add_skip_samples(n);
  CHECK(contains(error_of(too_big), "data.skip_samples: sample ID " + std::to_string(n) + " is outside the " +
                                        std::to_string(n) + " samples"));
  Config all = cfg;
  for (int64_t id = 0; id < n; ++id) all.mutable_data()->add_skip_samples(id);
  CHECK(contains(error_of(all), "data.skip_samples skips all " + std::to_string(n) + " samples"));
  // Validation never skips: the list names train samples.
  CHECK(BatchSource::open(skipping, Split::Valid).skip_samples().empty());
}

TEST_CASE("replica and microbatch assignment covers the global batch exactly once") {
  ScratchDir dir;
  write_dataset(dir / "c", make_docs());
  const Config cfg = small_config(dir / "c", 16, 2, 3, 12);  // 2 microbatches per replica
  REQUIRE(config::microbatches_per_replica(cfg) == 2);
  const BatchSource src = BatchSource::open(cfg);
  for (int64_t c : {int64_t(0), int64_t(12), int64_t(36), src.samples_per_epoch() - 5}) {
    const auto ids = src.global_batch_ids(c);
    REQUIRE(ids.size() == 12);
    const BatchCounts counts = src.global_counts(c);
    std::vector<int64_t> assigned;
    int64_t loss = 0, pad = 0;
    for (int dp = 0; dp < 3; ++dp) {
      for (int m = 0; m < 2; ++m) {
        const Microbatch mb = src.microbatch(c, dp, m);
        CHECK(mb.batch == 2);
        CHECK(mb.seq == 16);
        CHECK(mb.tokens.size() == 32);
        CHECK(mb.global_loss_tokens == counts.loss_tokens);
        assigned.insert(assigned.end(), mb.sample_ids.begin(), mb.sample_ids.end());
        loss += mb.loss_tokens;
        pad += mb.padding_tokens;
        float s = 0;
        for (float v : mb.loss_mask) s += v;
        CHECK(int64_t(s) == mb.loss_tokens);
      }
    }
    // Replica-major, then microbatch, then row: exactly the global batch's order.
    CHECK(assigned == ids);
    CHECK(counts.samples == 12);
    CHECK(counts.input_tokens == 12 * 16);
    CHECK(counts.loss_tokens == loss);
    CHECK(counts.padding_tokens == pad);
  }
  CHECK_THROWS_AS(src.microbatch(0, 3, 0), std::out_of_range);
  CHECK_THROWS_AS(src.microbatch(0, 0, 2), std::out_of_range);
}

TEST_CASE("microbatch rows are the packed windows of the dataset") {
  ScratchDir dir;
  const auto docs = make_docs();
  write_dataset(dir / "c", docs);
  const Config cfg = small_config(dir / "c", 16, 4, 1, 8);
  const BatchSource src = BatchSource::open(cfg);
  const Microbatch mb = src.microbatch(40, 0, 1);
  for (int r = 0; r < 4; ++r) {
    for (int j = 0; j < 16; ++j) {
      const size_t i = size_t(r * 16 + j);
      if (j + 1 < 16) CHECK(mb.targets[i] == mb.tokens[i + 1]);
      if (mb.positions[i] == 0) continue;
      // Inside a document consecutive tokens count up by one (mod 250) or end in EOD.
      CHECK(mb.segments[i] == mb.segments[i - 1]);
      CHECK((mb.tokens[i] == 256 || mb.tokens[i] == (mb.tokens[i - 1] + 1) % 250));
    }
    for (int j = 0; j < 16; ++j) {
      const size_t i = size_t(r * 16 + j);
      // The loss mask is 0 exactly where the input is EOD (a cross-document prediction).
      CHECK((mb.loss_mask[i] == 0.f) == (mb.tokens[i] == 256));
    }
  }
}

TEST_CASE("validation split: its own documents, its own order; training never reads them") {
  ScratchDir dir;
  // Documents 0..269 use tokens below 100, documents 270..299 tokens from 150 on.
  std::vector<std::vector<int32_t>> docs;
  for (int d = 0; d < 300; ++d) {
    std::vector<int32_t> doc;
    for (int k = 0; k < 5 + d % 17; ++k) doc.push_back(d < 270 ? (d + k) % 100 : 150 + (d + k) % 100);
    doc.push_back(256);
    docs.push_back(doc);
  }
  write_dataset(dir / "c", docs);
  Config cfg = small_config(dir / "c", 8, 1, 1, 4);
  cfg.mutable_data()->set_split("90,10,0");
  const BatchSource train = BatchSource::open(cfg, Split::Train);
  const BatchSource valid = BatchSource::open(cfg, Split::Valid);
  CHECK(train.documents() == 270);
  CHECK(valid.documents() == 30);
  CHECK(train.index_path() != valid.index_path());
  auto token_range = [](const BatchSource& s) {
    int32_t lo = 1 << 30, hi = -1;
    for (int64_t id = 0; id < s.samples_per_epoch(); ++id) {
      const Microbatch mb = s.samples(std::vector<int64_t>{id});
      for (int32_t t : mb.tokens) {
        if (t == 256) continue;
        lo = std::min(lo, t);
        hi = std::max(hi, t);
      }
    }
    return std::pair{lo, hi};
  };
  const auto [tlo, thi] = token_range(train);
  const auto [vlo, vhi] = token_range(valid);
  CHECK(tlo >= 0);
  CHECK(thi < 100);
  CHECK(vlo >= 150);
  CHECK(vhi < 250);
  // Its own order: a permutation of its own samples, keyed apart from training's.
  std::vector<int64_t> order;
  for (int64_t i = 0; i < valid.samples_per_epoch(); ++i) order.push_back(valid.sample_at(i));
  std::sort(order.begin(), order.end());
  for (int64_t i = 0; i < valid.samples_per_epoch(); ++i) CHECK(order[size_t(i)] == i);
  CHECK_THROWS_WITH_AS(BatchSource::open(cfg, Split::Test), doctest::Contains("the test split of"), DataError);
}

TEST_CASE("pad-to-boundary through BatchSource: padding counted and masked") {
  ScratchDir dir;
  write_dataset(dir / "c", make_docs());
  Config cfg = small_config(dir / "c", 32, 2, 1, 4);
  cfg.mutable_data()->set_pad_to_boundary(true);
  const BatchSource src = BatchSource::open(cfg);
  const BatchCounts c = src.global_counts(0);
  CHECK(c.padding_tokens > 0);
  const Microbatch mb = src.microbatch(0, 0, 0);
  for (size_t i = 0; i < mb.tokens.size(); ++i) {
    if (mb.loss_mask[i] != 0.f) CHECK(mb.tokens[i] != src.pad_id());
  }
  CHECK(mb.padding_tokens + mb.loss_tokens <= 2 * 32);
}

TEST_CASE("the sample index is cached, keyed, and rebuilt when stale") {
  ScratchDir dir;
  write_dataset(dir / "c", make_docs());
  const Config cfg = small_config(dir / "c", 16, 1, 1, 4);
  const BatchSource a = BatchSource::open(cfg);
  CHECK_FALSE(a.index_from_cache());
  REQUIRE(std::filesystem::exists(a.index_path()));
  CHECK(BatchSource::open(cfg).index_from_cache());

  Config longer = cfg;
  longer.mutable_batch()->set_seq_length(24);
  const BatchSource b = BatchSource::open(longer);
  CHECK(b.index_path() != a.index_path());
  CHECK_FALSE(b.index_from_cache());

  // New data under the same prefix: the stored key no longer matches.
  write_dataset(dir / "c", make_docs(200));
  const BatchSource c = BatchSource::open(cfg);
  CHECK_FALSE(c.index_from_cache());
  CHECK(c.index_path() == a.index_path());
  CHECK(c.documents() == 196);

  // A damaged cache is rebuilt, not trusted.
  std::string bytes = read_text(c.index_path());
  bytes[bytes.size() / 2] ^= 0x5a;
  write_text(c.index_path(), bytes);
  const BatchSource d = BatchSource::open(cfg);
  CHECK_FALSE(d.index_from_cache());
  CHECK(d.samples_per_epoch() == c.samples_per_epoch());
  CHECK(count_temporaries(dir.path()) == 0);
}

namespace {

// Rewrites the uint16 token at `byte` of `bin` in place, then puts back the file's
// modification time to the nanosecond: size and mtime say nothing changed.
void poke_token_keeping_mtime(const std::string& bin, size_t byte, uint16_t value) {
  struct stat before {};
  REQUIRE(::stat(bin.c_str(), &before) == 0);
  std::string bytes = read_text(bin);
  std::memcpy(bytes.data() + byte, &value, 2);
  write_text(bin, bytes);
  const timespec times[2] = {before.st_atim, before.st_mtim};
  REQUIRE(::utimensat(AT_FDCWD, bin.c_str(), times, 0) == 0);
  struct stat after {};
  REQUIRE(::stat(bin.c_str(), &after) == 0);
  REQUIRE(after.st_size == before.st_size);
  REQUIRE(after.st_mtim.tv_sec == before.st_mtim.tv_sec);
  REQUIRE(after.st_mtim.tv_nsec == before.st_mtim.tv_nsec);
}

}  // namespace

TEST_CASE("the sample index cache notices a token changed with size and mtime kept") {
  ScratchDir dir;
  write_dataset(dir / "c", make_docs());
  const Config cfg = small_config(dir / "c", 16, 1, 1, 4);
  REQUIRE_FALSE(BatchSource::open(cfg).index_from_cache());
  REQUIRE(BatchSource::open(cfg).index_from_cache());

  // Sequence 5 is in the train split; its first token becomes 65535, past vocab_size 257.
  const IndexedDataset d = IndexedDataset::open(dir / "c");
  const size_t byte = size_t(d.sequence_pointer(5));
  poke_token_keeping_mtime(dir / "c.bin", byte, 65535);
  CHECK(error_of(cfg) == dir / "c.bin" + ": token ID 65535 at byte offset " + std::to_string(byte) +
                             " is >= model.vocab_size 257 (was the data prepared with another tokenizer?)");

  // A change inside the vocabulary: the index is rebuilt from the new content.
  poke_token_keeping_mtime(dir / "c.bin", byte, 7);
  const BatchSource src = BatchSource::open(cfg);
  CHECK_FALSE(src.index_from_cache());
  CHECK(IndexedDataset::open(dir / "c").sequence(5).front() == 7);
  CHECK(BatchSource::open(cfg).index_from_cache());
}

TEST_CASE("a FIFO in place of the cached sample index is replaced, not read") {
  ScratchDir dir;
  write_dataset(dir / "c", make_docs());
  const Config cfg = small_config(dir / "c", 16, 1, 1, 4);
  const std::string path = BatchSource::open(cfg).index_path();
  std::filesystem::remove(path);
  make_fifo(path);
  const BatchSource a = BatchSource::open(cfg);
  CHECK_FALSE(a.index_from_cache());
  CHECK(std::filesystem::is_regular_file(path));
  CHECK(BatchSource::open(cfg).index_from_cache());
}

TEST_CASE("concurrent const calls agree with sequential ones") {
  ScratchDir dir;
  write_dataset(dir / "c", make_docs());
  const Config cfg = small_config(dir / "c", 16, 2, 2, 8);
  const BatchSource src = BatchSource::open(cfg);
  std::vector<std::vector<int32_t>> want;
  for (int64_t c = 0; c < 400; c += 8) want.push_back(src.microbatch(c, 1, 0).tokens);
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t c = 0, k = 0; c < 400; c += 8, ++k) bad[size_t(t)] += src.microbatch(c, 1, 0).tokens != want[size_t(k)];
    });
  }
  for (auto& th : threads) th.join();
  CHECK(bad == std::vector<int>{0, 0, 0, 0});
}

TEST_CASE("bad inputs: one clear error each") {
  ScratchDir dir;
  write_dataset(dir / "c", make_docs());
  Config cfg = small_config(dir / "c", 16, 2, 2, 8);

  Config missing = cfg;
  missing.mutable_data()->set_prefix(dir / "absent");
  CHECK(contains(error_of(missing), "absent.idx: missing"));

  Config small_vocab = cfg;
  small_vocab.mutable_model()->set_vocab_size(200);
  const std::string v = error_of(small_vocab);
  CHECK(contains(v, "c.bin: token ID 256 at byte offset "));
  CHECK(contains(v, "is >= model.vocab_size 200"));

  Config window = cfg;
  window.mutable_batch()->set_seq_length(100000);
  CHECK(contains(error_of(window), "batch.seq_length 100000 needs windows of 100001 tokens, but the train split of"));

  Config geometry = cfg;
  geometry.mutable_batch()->set_global_batch_size(10);
  CHECK(contains(error_of(geometry), "batch.global_batch_size 10 must be a positive multiple"));

  write_dataset(dir / "empty", {});
  Config empty = cfg;
  empty.mutable_data()->set_prefix(dir / "empty");
  CHECK(contains(error_of(empty), "empty corpus: " + (dir / "empty.idx")));

  Config gpt2_default = cfg;
  gpt2_default.mutable_data()->set_prefix("");
  gpt2_default.mutable_data()->set_tokenizer(DataConfig::GPT2);
  CHECK(contains(error_of(gpt2_default), "the embedded default corpus is byte-tokenized"));

  write_dataset(dir / "few", {{1, 2, 256}});
  Config few = cfg;
  few.mutable_data()->set_prefix(dir / "few");
  CHECK(contains(error_of(few, Split::Valid), "the valid split of"));
}

TEST_CASE("empty data.prefix opens the embedded default under TROUPE_DATA_DIR") {
  if (!std::filesystem::exists(std::string(kFortunesDir) + "/fortunes")) {
    MESSAGE("fortunes not installed: skipped");
    return;
  }
  ScratchDir dir;
  const char* old = std::getenv("TROUPE_DATA_DIR");
  const std::string saved = old ? old : "";
  ::setenv("TROUPE_DATA_DIR", (dir / "data").c_str(), 1);
  Config cfg = small_config("", 128, 2, 2, 16);
  const BatchSource train = BatchSource::open(cfg);
  CHECK(train.prefix() == dir / "data/fortunes-bytes");
  CHECK(train.samples_per_epoch() > 10000);
  const BatchSource valid = BatchSource::open(cfg, Split::Valid);
  CHECK(valid.documents() * 40 < train.documents());  // 2% of the fortunes
  CHECK(BatchSource::open(cfg).index_from_cache());
  if (old) ::setenv("TROUPE_DATA_DIR", saved.c_str(), 1); else ::unsetenv("TROUPE_DATA_DIR");
}

TEST_CASE("a dataset tokenized elsewhere (tokenizer NONE) pads with its own end-of-document ID") {
  // Documents padded to the window end (pad_to_boundary): padding positions take the
  // pad ID, BYTES' 256 or NONE's data.eod_id (here 7), and carry no loss either way.
  ScratchDir dir;
  write_dataset(dir / "c", make_docs());
  Config bytes = small_config(dir / "c", 16, 2, 2, 8);
  bytes.mutable_data()->set_pad_to_boundary(true);
  Config none = bytes;
  none.mutable_data()->set_tokenizer(DataConfig::NONE);
  none.mutable_data()->set_eod_id(7);
  const BatchSource a = BatchSource::open(bytes), b = BatchSource::open(none);
  const Microbatch ma = a.microbatch(0, 0, 0), mb = b.microbatch(0, 0, 0);
  REQUIRE(ma.padding_tokens > 0);
  CHECK(mb.padding_tokens == ma.padding_tokens);
  int padded = 0;
  for (size_t i = 0; i < ma.tokens.size(); ++i) {
    if (ma.tokens[i] == mb.tokens[i]) continue;  // real tokens agree
    CHECK(ma.tokens[i] == 256);
    CHECK(mb.tokens[i] == 7);
    CHECK(mb.loss_mask[i] == 0.0f);
    ++padded;
  }
  CHECK(padded > 0);
  CHECK(ma.loss_mask == mb.loss_mask);
}

TEST_CASE("a tokenizer.json run (HF_JSON) pads with the file's EOD and needs model.vocab_size to hold the file") {
  // The Llama-3-style fixture: 901 IDs, EOD <|end_of_text|> = 1.
  ScratchDir dir;
  write_dataset(dir / "c", make_docs(), 901);
  Config bytes = small_config(dir / "c", 16, 2, 2, 8);
  bytes.mutable_data()->set_pad_to_boundary(true);
  bytes.mutable_model()->set_vocab_size(904);
  Config hf = bytes;
  hf.mutable_data()->set_tokenizer(DataConfig::HF_JSON);
  const std::string file = std::string(TROUPE_SOURCE_DIR) + "/test/data/fixtures/hf/llama3_style.tokenizer.json";
  hf.mutable_data()->set_tokenizer_file(file);
  const BatchSource a = BatchSource::open(bytes), b = BatchSource::open(hf);
  const Microbatch ma = a.microbatch(0, 0, 0), mb = b.microbatch(0, 0, 0);
  REQUIRE(ma.padding_tokens > 0);
  int padded = 0;
  for (size_t i = 0; i < ma.tokens.size(); ++i) {
    if (ma.tokens[i] == mb.tokens[i]) continue;
    CHECK(ma.tokens[i] == 256);
    CHECK(mb.tokens[i] == 1);
    ++padded;
  }
  CHECK(padded > 0);
  Config eod = hf;  // data.eod_id overrides the file's choice
  eod.mutable_data()->set_eod_id(0);
  const Microbatch me = BatchSource::open(eod).microbatch(0, 0, 0);
  for (size_t i = 0; i < ma.tokens.size(); ++i)
    if (ma.tokens[i] != mb.tokens[i]) CHECK(me.tokens[i] == 0);

  Config small = hf;
  small.mutable_model()->set_vocab_size(900);
  CHECK(error_of(small) == "data.tokenizer_file " + file +
                               " has a vocabulary of 901 IDs, more than model.vocab_size 900");
  Config missing = hf;
  missing.mutable_data()->set_tokenizer_file(dir / "none.json");
  CHECK(error_of(missing) == dir / "none.json" +
                                 ": cannot open the Hugging Face tokenizer (tokenizer.json): No such file or directory");
}
