#include "data/sample_index.h"

#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <sstream>

#include <spdlog/spdlog.h>

#include "data/atomic_file.h"
#include "data/error.h"
#include "data/mapped_file.h"
#include "data/random.h"

namespace troupe::data {
namespace {

constexpr char kMagic[8] = {'T', 'R', 'P', 'S', 'I', 'D', 'X', '1'};

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string settings_text(const SampleIndexSettings& s) {
  std::ostringstream k;
  k << "split " << split_name(s.split) << " of \"" << s.split_weights << "\"\n"
    << "seq_length " << s.seq_length << "\n"
    << "pad_to_boundary " << (s.pad_to_boundary ? 1 : 0) << "\n"
    << "seed " << s.seed << "\n";
  return k.str();
}

class Out {
 public:
  template <class T>
  void put(const T& v) { bytes_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  template <class T>
  void put(const std::vector<T>& v) { bytes_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)); }
  void raw(const void* p, size_t n) { bytes_.append(static_cast<const char*>(p), n); }
  std::string& bytes() { return bytes_; }

 private:
  std::string bytes_;
};

class In {
 public:
  explicit In(const std::string& b) : b_(b) {}
  template <class T>
  bool get(T& v) {
    if (pos_ + sizeof v > b_.size()) return false;
    std::memcpy(&v, b_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return true;
  }
  template <class T>
  bool get(std::vector<T>& v, uint64_t n) {
    if (n > (b_.size() - pos_) / sizeof(T)) return false;
    v.resize(n);
    std::memcpy(v.data(), b_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return true;
  }
  bool get_string(std::string& s, uint64_t n) {
    if (n > b_.size() - pos_) return false;
    s.assign(b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  size_t pos() const { return pos_; }

 private:
  const std::string& b_;
  size_t pos_ = 0;
};

std::string serialize(const std::string& key, const SampleIndex& x) {
  Out o;
  o.raw(kMagic, sizeof kMagic);
  o.put(uint64_t(key.size()));
  o.raw(key.data(), key.size());
  o.put(x.documents.begin);
  o.put(x.documents.end);
  o.put(int64_t(x.doc_order.size()));
  o.put(int64_t(x.samples()));
  o.put(x.split_tokens);
  o.put(int64_t(x.max_token));
  o.put(x.max_token_bin_offset);
  o.put(int64_t(x.min_token_negative ? 1 : 0));
  o.put(x.negative_token_bin_offset);
  o.put(x.doc_order);
  o.put(x.start_doc);
  o.put(x.start_offset);
  o.put(x.loss_tokens);
  o.put(x.padding_tokens);
  o.put(fnv1a(o.bytes().data(), o.bytes().size()));
  return std::move(o.bytes());
}

// Returns false when the file is absent, damaged or built for another key.
bool deserialize(const std::string& bytes, const std::string& key, SampleIndex& x) {
  if (bytes.size() < sizeof kMagic + 16 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return false;
  uint64_t stored_sum = 0;
  std::memcpy(&stored_sum, bytes.data() + bytes.size() - 8, 8);
  if (fnv1a(bytes.data(), bytes.size() - 8) != stored_sum) return false;
  In in(bytes);
  std::string magic, stored_key;
  uint64_t key_len = 0;
  int64_t docs = 0, samples = 0, max_token = 0, negative = 0;
  if (!in.get_string(magic, sizeof kMagic) || !in.get(key_len) || !in.get_string(stored_key, key_len) ||
      stored_key != key) {
    return false;
  }
  if (!in.get(x.documents.begin) || !in.get(x.documents.end) || !in.get(docs) || !in.get(samples) ||
      !in.get(x.split_tokens) || !in.get(max_token) || !in.get(x.max_token_bin_offset) ||
      !in.get(negative) || !in.get(x.negative_token_bin_offset) || docs < 0 || samples < 0) {
    return false;
  }
  x.max_token = int32_t(max_token);
  x.min_token_negative = negative != 0;
  if (!in.get(x.doc_order, uint64_t(docs)) || !in.get(x.start_doc, uint64_t(samples)) ||
      !in.get(x.start_offset, uint64_t(samples)) || !in.get(x.loss_tokens, uint64_t(samples)) ||
      !in.get(x.padding_tokens, uint64_t(samples))) {
    return false;
  }
  return in.pos() + 8 == bytes.size();
}

// The cache's bytes, or nullopt when there is none or it cannot be used (a FIFO,
// directory or device there is refused without blocking; it is then replaced).
std::optional<std::string> read_cache(const IndexedDataset& data, const std::string& path, size_t key_bytes) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return std::nullopt;
  // A valid index holds at most one sample per token (plus one) and 24 bytes a
  // sample; anything larger is damaged, and is not read.
  const size_t max_bytes = 1024 + key_bytes + 8 * size_t(data.sequences()) + 24 * size_t(data.total_tokens() + 1);
  try {
    return read_input_file(path, "cached sample index", max_bytes);
  } catch (const DataError& e) {
    spdlog::info("data: {}; rebuilding it", e.what());
    return std::nullopt;
  }
}

}  // namespace

uint64_t document_order_seed(uint64_t seed, Split split) {
  return mix_seed(mix_seed(seed, 0x646f63u /* "doc" */), uint64_t(split));
}

uint64_t epoch_key(uint64_t seed, Split split, int64_t epoch) {
  return mix_seed(mix_seed(mix_seed(seed, 0x65706fu /* "epo" */), uint64_t(split)), uint64_t(epoch));
}

std::string sample_index_key(const IndexedDataset& data, const SampleIndexSettings& s) {
  // The content checksums cover the sequence lengths (in the .idx) and every token
  // (the .bin, whose largest ID the index stores for the vocabulary check).
  std::ostringstream k;
  k << "troupe sample index v2\n" << settings_text(s) << data.content_fingerprint() << "\n";
  return k.str();
}

std::string sample_index_path(const IndexedDataset& data, const SampleIndexSettings& s) {
  const std::string settings = settings_text(s);
  return data.prefix() + ".troupe-" + split_name(s.split) + "-" +
         hex16(fnv1a(settings.data(), settings.size())) + ".sidx";
}

SampleIndex build_sample_index(const IndexedDataset& data, const SampleIndexSettings& s) {
  SampleIndex x;
  x.documents = split_documents(s.split_weights, data.sequences())[size_t(s.split)];
  x.doc_order.resize(size_t(x.documents.size()));
  for (int64_t i = 0; i < x.documents.size(); ++i) x.doc_order[size_t(i)] = x.documents.begin + i;
  shuffle(x.doc_order, document_order_seed(s.seed, s.split));

  // Token scan: the largest ID (and any negative one) with its place in .bin.
  std::vector<int32_t> buf;
  const int64_t item = int64_t(dtype_size(data.dtype()));
  for (int64_t seq = x.documents.begin; seq < x.documents.end; ++seq) {
    const int64_t len = data.sequence_length(seq);
    x.split_tokens += len;
    buf.resize(size_t(len));
    data.read(seq, 0, len, buf.data());
    for (int64_t i = 0; i < len; ++i) {
      const int32_t t = buf[size_t(i)];
      if (t > x.max_token) {
        x.max_token = t;
        x.max_token_bin_offset = data.sequence_pointer(seq) + i * item;
      }
      if (t < 0 && !x.min_token_negative) {
        x.min_token_negative = true;
        x.negative_token_bin_offset = data.sequence_pointer(seq) + i * item;
      }
    }
  }

  auto length_of = [&](int64_t pos) { return int64_t(data.sequence_length(x.doc_order[size_t(pos)])); };
  const int64_t docs = int64_t(x.doc_order.size());
  Window w;
  StreamPos p;
  while (true) {
    next_window(length_of, docs, p, s.seq_length, s.pad_to_boundary, w);
    if (!w.complete) break;
    x.start_doc.push_back(w.pieces.front().doc);
    x.start_offset.push_back(w.pieces.front().offset);
    x.loss_tokens.push_back(w.loss_tokens);
    x.padding_tokens.push_back(w.padding_tokens);
    p = w.next;
  }
  return x;
}

SampleIndex load_or_build_sample_index(const IndexedDataset& data, const SampleIndexSettings& s) {
  const std::string key = sample_index_key(data, s);
  const std::string path = sample_index_path(data, s);
  if (const auto bytes = read_cache(data, path, key.size())) {
    SampleIndex x;
    if (deserialize(*bytes, key, x)) {
      x.from_cache = true;
      x.cache_path = path;
      return x;
    }
    spdlog::info("data: sample index {} is stale or damaged; rebuilding it", path);
  }
  const auto t0 = std::chrono::steady_clock::now();
  SampleIndex x = build_sample_index(data, s);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  try {
    write_file_atomically(path, serialize(key, x));
    x.cache_path = path;
  } catch (const DataError& e) {
    spdlog::warn("data: sample index not cached ({}); it is rebuilt on every start", e.what());
  }
  spdlog::info("data: built the {} sample index of {} ({} documents, {} samples) in {:.3f} s",
               split_name(s.split), data.prefix(), x.doc_order.size(), x.samples(), secs);
  return x;
}

}  // namespace troupe::data
