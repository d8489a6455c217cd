#include "model/layers/embedding.h"

#include <stdexcept>

namespace troupe::model::layers {

Embedding::Embedding(const EmbeddingConfig& c, EmbeddingWeights w, TpContext& tp) : c_(c), w_(w), tp_(tp) {
  if (!w_.wte) throw std::invalid_argument("Embedding: needs the token table");
  if ((c_.positions == Positions::kLearned) != bool(w_.wpe))
    throw std::invalid_argument("Embedding: a position table exactly when positions are learned");
}

void Embedding::forward(float* out, const int32_t* tokens, const Sequence& seq, float* partial) {
  kernels::Device& dev = tp_.device();
  const int N = seq.tokens();
  const int32_t* positions = seq.positions;
  if (tp_.size() == 1 && w_.wpe) {
    dev.embedding_forward(out, tokens, positions, w_.wte.value, w_.wpe.value, N, c_.width);
  } else {
    // One rank's share (the whole table at TP = 1 without positions); summed over the
    // group into this rank's rows.
    float* share = tp_.sequence() ? partial : out;
    dev.embedding_forward_shard(share, tokens, positions, w_.wte.value, tp_.owner() ? w_.wpe.value : nullptr, N,
                                c_.width, c_.vocab.begin, c_.vocab.rows);
    tp_.reduce_to_rows(share, out, N, c_.width);
  }
  const kernels::DropoutMask m = dropout_mask(c_.dropout, seq, 0);
  if (m.on()) dev.dropout(out, out, nullptr, tp_.first_row(N), tp_.rows(N), c_.width, seq.T, m);
}

void Embedding::backward(float* dout, const int32_t* tokens, const Sequence& seq, WeightGradQueue* defer) {
  kernels::Device& dev = tp_.device();
  const int N = seq.tokens();
  dropout_backward_rows(tp_, dropout_mask(c_.dropout, seq, 0), seq, dout, dout, c_.width);
  tp_.gather_sequence(dout, N, c_.width);
  auto scatter = [this, &dev, tokens, positions = seq.positions, N](const float* d) {
    if (tp_.size() == 1 && w_.wpe)
      dev.embedding_backward(w_.wte.grad, w_.wpe.grad, d, tokens, positions, N, c_.width);
    else
      dev.embedding_backward_shard(w_.wte.grad, w_.wpe.grad, d, tokens, positions, N, c_.width, c_.vocab.begin,
                                   c_.vocab.rows);
  };
  if (!defer) {
    scatter(dout);
    return;
  }
  const float* kept = defer->keep(dev, dout, int64_t(N) * c_.width);
  defer->push([scatter, kept] { scatter(kept); });
}

}  // namespace troupe::model::layers
