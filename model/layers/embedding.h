// The input embedding: token rows of wte, plus learned positions (GPT-2's wpe) or
// none (a model whose attention places tokens, e.g. with rotary positions).
//
// Vocabulary-parallel at TP > 1: rank t holds wte rows VocabShard [begin, begin +
// rows), writes its own tokens' rows and 0 for the others, rank 0 adds the
// positions, and the group sums (x + 0 is exact, so this equals TP = 1 bit for bit).
#pragma once

#include <cstdint>

#include "model/layers/dropout.h"
#include "model/layers/layer.h"
#include "model/layers/tp_context.h"
#include "model/layers/weight_grad_queue.h"

namespace troupe::model::layers {

enum class Positions { kLearned, kNone };

struct EmbeddingConfig {
  int width = 0;  // D
  Positions positions = Positions::kLearned;
  VocabShard vocab;
  DropoutConfig dropout;  // hidden_dropout on the output (layers/dropout.h)
};

// wte: this rank's rows [vocab.rows, D]; wpe: [max_positions, D] (replicated), absent
// with Positions::kNone.
struct EmbeddingWeights {
  Weight wte, wpe;
};

class Embedding {
 public:
  Embedding(const EmbeddingConfig& c, EmbeddingWeights w, TpContext& tp);
  // out[Nr, D] = dropout(wte[tokens[n]] + wpe[positions[n]]) for this rank's rows n.
  // tokens [N] (device memory), positions seq.positions, N = seq.tokens();
  // partial [N, D]: scratch (TP > 1 with SP).
  void forward(float* out, const int32_t* tokens, const Sequence& seq, float* partial);
  // dout[N, D] with this rank's rows filled (masked in place by the dropout, then
  // completed in place under SP).
  // d wte[tokens[n] - begin] += dout[n] for this rank's tokens, in token order;
  // d wpe[positions[n]] += dout[n].
  // defer (the split backward's input pass): the masked, completed dout is kept there
  // and the scatter-adds queued (they are weight gradients: the weight pass's).
  void backward(float* dout, const int32_t* tokens, const Sequence& seq, WeightGradQueue* defer = nullptr);
  // Floats the deferred backward keeps: dout [cap, D].
  static int64_t deferred_floats(int64_t cap_tokens, int width) { return cap_tokens * width; }

 private:
  EmbeddingConfig c_;
  EmbeddingWeights w_;
  TpContext& tp_;
};

}  // namespace troupe::model::layers
