// The model shapes the runtime benchmarks share (runtime_bench, placement_bench):
//   tiny:  2 layers, 4 heads, width 64, byte vocabulary (257), 64 positions, seq 64
//   small: 4 layers, 4 heads, width 256, vocabulary 4096, 128 positions, seq 128
// Each benchmark sets its own batch, schedule and run options on top.
#pragma once

#include <string_view>

#include "messages/config.pb.h"

namespace troupe::bench {

inline void set_model_shape(Config& c, std::string_view name) {
  auto* m = c.mutable_model();
  const bool tiny = name == "tiny";
  m->set_layers(tiny ? 2 : 4);
  m->set_heads(4);
  m->set_width(tiny ? 64 : 256);
  m->set_vocab_size(tiny ? 257 : 4096);
  m->set_max_positions(tiny ? 64 : 128);
  c.mutable_batch()->set_seq_length(tiny ? 64 : 128);
}

}  // namespace troupe::bench
