// What the model is told of a run, and all it is told: its section of the config, the
// seed its initial weights and dropout masks come from, the vocabulary padded for the
// tensor-parallel group, and whether its backward is split into an input pass and a
// deferred weight pass. The schedule, the layout and the placement stay outside the
// model: the zero-bubble schedule is what asks for split_backward, the tensor-parallel
// size arrives as the padding here and as the slice a registry holds.
//
// A run's Config converts to it (implicitly: every caller that holds a Config hands
// the model this piece of it; the model's classes keep only the spec).
#pragma once

#include <cstdint>

#include "messages/config.pb.h"

namespace troupe::model {

struct ModelSpec {
  ModelConfig model;
  uint64_t seed = 0;          // training.seed
  int64_t padded_vocab = 0;   // config::padded_vocab: vocab_size rounded up for the tensor-parallel group
  bool split_backward = false;  // parallel.schedule ZB_H1: backward_input now, backward_weight later

  ModelSpec(const Config& c);  // NOLINT(google-explicit-constructor): the one way a run's config reaches the model
  ModelSpec(ModelConfig m, uint64_t seed, int64_t padded_vocab, bool split_backward = false);
};

}  // namespace troupe::model
