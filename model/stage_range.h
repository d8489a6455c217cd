// Which transformer blocks a model object holds. A pipeline stage is a layer range
// [first_layer, last_layer) of the config's model: the stage holding layer 0 also
// owns the embeddings (wte, wpe), the stage ending at the last layer owns ln_f, the
// LM head (tied to wte) and the loss. The whole model is [0, layers).
//
// Under the interleaved schedule (parallel.virtual_stages v > 1) a stage holds v
// ranges, its model chunks: chunk c of stage k is virtual stage c p + k, layers
// [(c p + k) L / (p v), (c p + k + 1) L / (p v)). Stage 0's chunk 0 then owns the
// embeddings, stage p-1's chunk v-1 the final norm, head and loss (StageLayers).
#pragma once

#include <string>
#include <vector>

#include "messages/config.pb.h"

namespace troupe::model {

struct StageRange {
  int first_layer = 0;
  int last_layer = 0;

  static StageRange whole(const Config& c) { return {0, c.model().layers()}; }
  // Stage k of a pipeline of `stages` equal stages (layers must divide evenly).
  static StageRange pipeline(const Config& c, int k, int stages);

  bool has_embedding() const { return first_layer == 0; }
  // Whether the range ends at the last of the model's `model_layers` layers.
  bool has_head(int model_layers) const { return last_layer == model_layers; }
  bool has_head(const Config& c) const { return has_head(c.model().layers()); }
  int layers() const { return last_layer - first_layer; }
  std::string str() const;
};

// The layers of one stage as its model chunks, in chunk order (one chunk without
// interleaving). Chunks are disjoint and ascending.
struct StageLayers {
  std::vector<StageRange> chunks;

  static StageLayers single(StageRange r) { return {{r}}; }
  // Stage k of the config's pipeline: parallel.pipeline stages of
  // parallel.virtual_stages chunks each (0 or 1: one chunk).
  static StageLayers pipeline(const Config& c, int k);
  // Stage k of `stages` with `chunks` chunks a stage (layers must divide by stages x chunks).
  static StageLayers pipeline(const Config& c, int k, int stages, int chunks);

  bool has_embedding() const { return !chunks.empty() && chunks.front().has_embedding(); }
  bool has_head(int model_layers) const { return !chunks.empty() && chunks.back().has_head(model_layers); }
  bool has_head(const Config& c) const { return has_head(c.model().layers()); }
  int count() const { return int(chunks.size()); }
  int layers() const;  // over every chunk
  // Global layer ids in order (chunk 0's first).
  std::vector<int> layer_ids() const;
  // Position of global layer `layer` among layer_ids(); -1 when not held.
  int index_of(int layer) const;
  std::string str() const;  // "layers [0, 2)" or "layers [0, 1) + [4, 5)"
};

}  // namespace troupe::model
