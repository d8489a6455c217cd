// Blends (data.blend): Megatron's dataset choice rule, the blended sample order, its
// skip list and counts, per-split blends, and bad input (docs/data.md, "Blends").
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "data/batch_source.h"
#include "data/blend.h"
#include "data/dataset_tokenizer.h"
#include "data/error.h"
#include "data/random.h"
#include "test/data/helpers.h"

using namespace troupe;
using namespace troupe::data;
using namespace troupe::data::testing;

namespace {

// Megatron's build_blending_indices written out plainly, over weights already
// normalized: the reference the table-backed BlendOrder must match choice for choice.
// Each product is rounded on its own (a volatile store), as in megatron-core's helper:
// a fused multiply-add would break ties the other way.
std::vector<int> reference_choices(const std::vector<double>& w, int64_t size) {
  std::vector<int64_t> taken(w.size(), 0);
  std::vector<int> out;
  auto error = [&](size_t d, double x) {
    volatile double product = w[d] * x;
    return product - double(taken[d]);
  };
  for (int64_t i = 0; i < size; ++i) {
    const double x = std::max(double(i), 1.0);
    int best = 0;
    double best_error = error(0, x);
    for (size_t d = 1; d < w.size(); ++d)
      if (const double e = error(d, x); e > best_error) best_error = e, best = int(d);
    out.push_back(best);
    ++taken[size_t(best)];
  }
  return out;
}

// `n` documents of 5..40 tokens from `first_token` up, then EOD (256).
std::vector<std::vector<int32_t>> docs_from(int first_token, int n, uint64_t seed) {
  std::vector<std::vector<int32_t>> docs;
  SplitMix64 rng(seed);
  for (int d = 0; d < n; ++d) {
    std::vector<int32_t> doc;
    const int len = 4 + int(rng.below(36));
    for (int k = 0; k < len; ++k) doc.push_back(first_token + (d + k) % 60);
    doc.push_back(256);
    docs.push_back(doc);
  }
  return docs;
}

// Three datasets whose tokens tell them apart: web 0..59, code 80..139, books 160..219.
struct ThreeDatasets {
  ScratchDir dir{"blend"};
  ThreeDatasets() {
    write_dataset(dir / "web", docs_from(0, 300, 1));
    write_dataset(dir / "code", docs_from(80, 120, 2));
    write_dataset(dir / "books", docs_from(160, 60, 3));
  }
  // One dataset alone, split as the blend splits it.
  Config one(const std::string& name) const {
    Config c = small_config(dir / name, 16, 2, 2, 8);
    c.mutable_data()->set_split("90,10,0");
    return c;
  }
  Config config(double w0 = 0.3, double w1 = 0.5, double w2 = 0.2) const {
    Config c = small_config("", 16, 2, 2, 8);
    c.mutable_data()->clear_prefix();
    c.mutable_data()->set_split("90,10,0");
    for (const auto& [w, name] : {std::pair{w0, "web"}, {w1, "code"}, {w2, "books"}}) {
      auto* e = c.mutable_data()->add_blend();
      e->set_weight(w);
      e->set_prefix(dir / name);
    }
    return c;
  }
};

std::string open_error(const Config& c, Split s = Split::Train) {
  try {
    BatchSource::open(c, s);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("numpy's pairwise sum and Megatron's normalization, bit for bit") {
  // Below 8 items numpy adds in order; from 8 on it keeps eight partial sums.
  const std::vector<double> three{0.1, 0.2, 0.3};
  CHECK(numpy_sum(three) == (0.1 + 0.2) + 0.3);
  std::vector<double> ten;
  for (int i = 1; i <= 10; ++i) ten.push_back(0.1 * i);
  const double r = ((ten[0] + ten[1]) + (ten[2] + ten[3])) + ((ten[4] + ten[5]) + (ten[6] + ten[7]));
  CHECK(numpy_sum(ten) == (r + ten[8]) + ten[9]);
  const auto w = megatron_normalize(three);
  CHECK(w[0] == 0.1 / ((0.1 + 0.2) + 0.3));
  // BlendedDataset normalizes what the builder already normalized.
  const BlendOrder order({0.3, 0.5, 0.2});
  CHECK(order.weights() == megatron_normalize(megatron_normalize({0.3, 0.5, 0.2})));
}

TEST_CASE("the blend follows Megatron's greedy rule, choice for choice") {
  // By hand for 0.3 / 0.5 / 0.2: the dataset furthest behind its share takes the next
  // position (position 0 and 1 both measure against one sample).
  const BlendOrder order({0.3, 0.5, 0.2});
  std::vector<int> first;
  for (int64_t i = 0; i < 10; ++i) first.push_back(order.dataset_at(i));
  CHECK(first == std::vector<int>{1, 0, 2, 1, 0, 1, 2, 1, 0, 1});

  // megatron-core's own choices for the first 120 positions (its compiled
  // build_blending_indices over its normalize, twice, as tools/data_blend_megatron_check.py
  // runs them): position 10 is a three-way tie that rounding decides, and an FMA
  // decides it the other way.
  const std::pair<std::vector<double>, std::string> megatron[] = {
      {{0.3, 0.5, 0.2},
       "102101210101210121010121012101012101210101210121010121012101012101210101210121010121012101012101210101210121"
       "010121012101"},
      {{2, 3, 5, 7, 11, 13, 17, 19, 23, 29},
       "987654938279685917468907598639478965879246897539867948596718923459876987695487963895709864297856987493618957"
       "986479582697"}};
  for (const auto& [raw, want] : megatron) {
    const BlendOrder b(raw);
    std::string got;
    for (int64_t i = 0; i < int64_t(want.size()); ++i) got += char('0' + b.dataset_at(i));
    CHECK(got == want);
  }

  // Against the plain loop, across the table's checkpoints and its growth, for weights
  // with ties, tiny shares and many datasets.
  const std::vector<std::vector<double>> cases = {
      {0.3, 0.5, 0.2}, {1, 1}, {1, 1, 1, 1}, {7, 1e-3, 3}, {0.25, 0.25, 0.5}, {2, 3, 5, 7, 11, 13, 17, 19, 23, 29}};
  for (const auto& raw : cases) {
    // A table read from its far end first (alone in the process: the table is shared
    // only while a BlendOrder of the weights holds it), then one grown step by step.
    int far_end = -1;
    std::vector<int64_t> far_taken;
    {
      const BlendOrder far(raw);
      far_end = far.dataset_at(149999);
      far_taken = far.taken_before(100000);
    }
    const BlendOrder b(raw);
    const auto ref = reference_choices(b.weights(), 150000);
    std::vector<int64_t> taken(raw.size(), 0);
    bool same = true;
    for (int64_t i = 0; i < int64_t(ref.size()); ++i) {
      same = same && b.dataset_at(i) == ref[size_t(i)];
      if (i % 9973 == 0) {
        REQUIRE(b.taken_before(i) == taken);
        const auto c = b.choice_at(i);
        CHECK(c.dataset == ref[size_t(i)]);
        CHECK(c.index == taken[size_t(ref[size_t(i)])]);
      }
      ++taken[size_t(ref[size_t(i)])];
    }
    CHECK(same);
    CHECK(b.taken_before(int64_t(ref.size())) == taken);
    CHECK(far_end == ref.back());
    CHECK(far_taken == b.taken_before(100000));
    // Another BlendOrder of the same weights reads the same table.
    CHECK(BlendOrder(raw).taken_before(150000) == taken);
  }
}

TEST_CASE("every dataset's count stays within one sample of its weight's share") {
  // The rule's bound: after n positions dataset d has taken within one of w_d * n.
  for (const auto& raw : std::vector<std::vector<double>>{{0.3, 0.5, 0.2}, {7, 1e-3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}}) {
    const BlendOrder b(raw);
    for (int64_t n : {int64_t(1), int64_t(10), int64_t(997), int64_t(4096), int64_t(100003)}) {
      const auto taken = b.taken_before(n);
      for (size_t d = 0; d < raw.size(); ++d) CHECK(std::abs(double(taken[d]) - b.weights()[d] * double(n)) < 1.0 + 1e-9);
    }
  }
}

TEST_CASE("first_position_beyond finds where a dataset takes one sample more") {
  const BlendOrder b({0.3, 0.5, 0.2});
  for (int d = 0; d < 3; ++d)
    for (int64_t count : {int64_t(0), int64_t(1), int64_t(5), int64_t(5000), int64_t(30001)}) {
      const int64_t p = b.first_position_beyond(d, count);
      CHECK(b.dataset_at(p) == d);
      CHECK(b.taken_before(p)[size_t(d)] == count);
    }
}

TEST_CASE("Megatron's per-dataset sizes carry its 0.5 % margin") {
  const BlendOrder b({0.3, 0.5, 0.2});
  // ceil(ceil(1000 * w) * 1.005): 300 -> 302, 500 -> 503, 200 -> 201.
  CHECK(b.megatron_dataset_sizes(1000) == std::vector<int64_t>{302, 503, 201});
}

TEST_CASE("a blended order: each position from the rule's dataset, each dataset in its own order") {
  ThreeDatasets t;
  const Config cfg = t.config();
  const BatchSource src = BatchSource::open(cfg);
  REQUIRE(src.datasets() == 3);
  CHECK(src.blended());
  const BlendOrder rule({0.3, 0.5, 0.2});
  // Sample IDs run over the datasets in the blend's order.
  std::vector<int64_t> sizes;
  for (const char* name : {"web", "code", "books"}) {
    sizes.push_back(BatchSource::open(t.one(name)).samples_per_epoch());
  }
  CHECK(src.samples_per_epoch() == sizes[0] + sizes[1] + sizes[2]);
  const int64_t offsets[3] = {0, sizes[0], sizes[0] + sizes[1]};
  // Dataset 0 keeps the order a one-dataset run of it has.
  const BatchSource web = BatchSource::open(t.one("web"));
  std::vector<std::vector<int64_t>> per(3);
  for (int64_t i = 0; i < 3000; ++i) {
    const int64_t id = src.sample_at(i);
    const int d = src.dataset_of(id);
    REQUIRE(d == rule.dataset_at(i));
    per[size_t(d)].push_back(id - offsets[d]);
  }
  for (size_t k = 0; k < per[0].size(); ++k) REQUIRE(per[0][k] == web.sample_at(int64_t(k)));
  // Each dataset's first epoch holds each of its samples once.
  for (int d = 0; d < 3; ++d) {
    const std::vector<int64_t> first(per[size_t(d)].begin(), per[size_t(d)].begin() + sizes[size_t(d)]);
    CHECK(std::set<int64_t>(first.begin(), first.end()).size() == size_t(sizes[size_t(d)]));
  }
  // The tokens come from the dataset the ID names (their ranges differ).
  const Microbatch mb = src.samples(std::vector<int64_t>{offsets[0], offsets[1], offsets[2]});
  for (int r = 0; r < 3; ++r) {
    const int32_t tok = mb.tokens[size_t(r * mb.seq)];
    CHECK((tok == 256 || (tok >= 80 * r && tok < 80 * r + 60)));
  }
  for (const auto& p : src.pieces_of(offsets[2] + 1)) CHECK(p.dataset == 2);
  // Counts: per dataset they add up to the batch's, and positions match the rule.
  const auto counts = src.dataset_counts(40, 8);
  const auto whole = src.global_counts(40);
  CHECK(counts[0].samples + counts[1].samples + counts[2].samples == 8);
  CHECK(counts[0].tokens + counts[1].tokens + counts[2].tokens == whole.input_tokens - whole.padding_tokens);
  CHECK(src.dataset_positions(48) == rule.taken_before(48));
}

TEST_CASE("a blend resumed at any consumed_samples reads what the uninterrupted one reads") {
  ThreeDatasets t;
  const Config cfg = t.config();
  const BatchSource run = BatchSource::open(cfg);
  std::vector<std::vector<int64_t>> ids;
  std::vector<Microbatch> mbs;
  for (int64_t c = 0; c < 2400; c += 8) {
    ids.push_back(run.global_batch_ids(c));
    mbs.push_back(run.microbatch(c, 1, 1));
  }
  for (int64_t resume : {int64_t(8), int64_t(400), int64_t(1600)}) {
    const BatchSource resumed = BatchSource::open(cfg);
    for (int64_t c = resume; c < 2400; c += 8) {
      REQUIRE(resumed.global_batch_ids(c) == ids[size_t(c / 8)]);
      REQUIRE(resumed.microbatch(c, 1, 1).tokens == mbs[size_t(c / 8)].tokens);
    }
  }
}

TEST_CASE("a blend of one dataset is the run of that dataset") {
  ThreeDatasets t;
  Config blend = t.one("code");
  blend.mutable_data()->clear_prefix();
  auto* e = blend.mutable_data()->add_blend();
  e->set_weight(2.5);
  e->set_prefix(t.dir / "code");
  const BatchSource a = BatchSource::open(blend), b = BatchSource::open(t.one("code"));
  for (int64_t i = 0; i < 500; ++i) REQUIRE(a.sample_at(i) == b.sample_at(i));
  CHECK(a.blended());
  CHECK(!b.blended());
}

TEST_CASE("skipping a blended sample changes its dataset's order only") {
  ThreeDatasets t;
  const Config cfg = t.config();
  const BatchSource plain = BatchSource::open(cfg);
  // Skip the sample at position 5, and one more of the same dataset.
  const int64_t victim = plain.sample_at(5);
  const int d = plain.dataset_of(victim);
  int64_t other = -1;
  for (int64_t i = 6; other < 0; ++i)
    if (plain.dataset_of(plain.sample_at(i)) == d) other = plain.sample_at(i);
  const std::vector<int64_t> skip{victim, other};
  const BatchSource skipping = BatchSource::open(cfg, Split::Train, skip);
  for (int64_t i = 0; i < 2000; ++i) {
    const int64_t id = skipping.sample_at(i);
    REQUIRE(skipping.dataset_of(id) == plain.dataset_of(plain.sample_at(i)));  // choices unchanged
    REQUIRE(id != victim);
    REQUIRE(id != other);
  }
  CHECK(skipping.skipped_in(0, 8) == std::vector<int64_t>{victim, other});
  CHECK(skipping.skipped_in(8, 8).empty());
  // The other datasets' orders are untouched.
  for (int64_t i = 0; i < 500; ++i) {
    const int64_t id = plain.sample_at(i);
    if (plain.dataset_of(id) != d) CHECK(skipping.sample_at(i) == id);
  }
  // A dataset's first epoch ends where the earliest dataset starts its second.
  const BlendOrder rule({0.3, 0.5, 0.2});
  int64_t end = INT64_MAX;
  for (int k = 0; k < 3; ++k) {
    const int64_t n = BatchSource::open(t.one(k == 0 ? "web" : k == 1 ? "code" : "books")).samples_per_epoch() - (k == d ? 2 : 0);
    end = std::min(end, rule.first_position_beyond(k, n));
  }
  CHECK(skipping.first_epoch_end() == end);
}

TEST_CASE("per-split blends read their datasets whole; the train blend splits each by data.split") {
  ThreeDatasets t;
  Config cfg = t.config();
  auto* v = cfg.mutable_data()->add_valid_blend();
  v->set_weight(1);
  v->set_prefix(t.dir / "books");
  const BatchSource valid = BatchSource::open(cfg, Split::Valid);
  CHECK(valid.datasets() == 1);
  CHECK(valid.blended());
  CHECK(valid.documents() == 60);  // all of books
  // Without valid_blend the validation split is each dataset's own (90,10,0 of it).
  const BatchSource split_valid = BatchSource::open(t.config(), Split::Valid);
  CHECK(split_valid.datasets() == 3);
  CHECK(split_valid.documents() == 30 + 12 + 6);
  // A dataset with its own split.
  Config own = t.config();
  own.mutable_data()->mutable_blend(1)->set_split("50,50,0");
  CHECK(BatchSource::open(own, Split::Valid).documents() == 30 + 60 + 6);
}

TEST_CASE("a blend's bad datasets: one error naming the file") {
  ThreeDatasets t;
  Config missing = t.config();
  missing.mutable_data()->mutable_blend(2)->set_prefix(t.dir / "nope");
  CHECK(open_error(missing).find(t.dir / "nope.idx") != std::string::npos);
  // Token widths that differ: datasets prepared with different vocabularies.
  write_dataset(t.dir / "wide", docs_from(0, 50, 4), 70000);
  Config wide = t.config();
  wide.mutable_data()->mutable_blend(1)->set_prefix(t.dir / "wide");
  wide.mutable_model()->set_vocab_size(70000);
  CHECK(open_error(wide) == "data.blend: " + (t.dir / "wide.idx") + " holds int32 tokens but " + (t.dir / "web.idx") +
                                " holds uint16 tokens: the datasets of a blend were prepared with different vocabularies");
  // A skip list that empties one dataset names it.
  const BatchSource src = BatchSource::open(t.config());
  std::vector<int64_t> all_books;
  for (int64_t id = 0; id < src.samples_per_epoch(); ++id)
    if (src.dataset_of(id) == 2) all_books.push_back(id);
  try {
    BatchSource::open(t.config(), Split::Train, all_books);
    FAIL("expected an error");
  } catch (const DataError& e) {
    CHECK(std::string(e.what()).find("skips all " + std::to_string(all_books.size()) + " samples of the train split of " +
                                     (t.dir / "books")) != std::string::npos);
  }
}

TEST_CASE("datasets prepared with different tokenizers are refused in one blend, naming both") {
  ThreeDatasets t;
  // What prepare-data writes beside its datasets; datasets made elsewhere have none.
  write_dataset_tokenizer(t.dir / "web", {"bytes", 257, 256});
  write_dataset_tokenizer(t.dir / "books", {"bytes", 257, 256});
  CHECK(open_error(t.config()).empty());
  write_dataset_tokenizer(t.dir / "code", {"hf", 257, 0});
  CHECK(open_error(t.config()) ==
        "data.blend: " + (t.dir / "code") + " was prepared with tokenizer hf (vocabulary 257, EOD 0, " +
            (t.dir / "code.troupe-tokenizer.json") + ") but " + (t.dir / "web") +
            " was prepared with tokenizer bytes (vocabulary 257, EOD 256, " + (t.dir / "web.troupe-tokenizer.json") +
            "): the datasets of a blend must share their vocabulary and end-of-document ID");
  // A dataset written again since its file (another size) leaves the file stale: ignored.
  write_dataset(t.dir / "code", docs_from(80, 121, 2));
  CHECK(!read_dataset_tokenizer(t.dir / "code"));
  CHECK(open_error(t.config()).empty());
  // A damaged file is named.
  write_text(t.dir / "web.troupe-tokenizer.json", "{\"tokenizer\": 3");
  CHECK(open_error(t.config()).find(t.dir / "web.troupe-tokenizer.json" + ": not a dataset tokenizer file") !=
        std::string::npos);
}
