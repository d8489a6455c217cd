// Which transformer blocks a model object holds. A pipeline stage is a layer range
// [first_layer, last_layer) of the config's model: the stage holding layer 0 also
// owns the embeddings (wte, wpe), the stage ending at the last layer owns ln_f, the
// LM head (tied to wte) and the loss. The whole model is [0, layers).
#pragma once

#include <string>

#include "messages/config.pb.h"

namespace troupe::model {

struct StageRange {
  int first_layer = 0;
  int last_layer = 0;

  static StageRange whole(const Config& c) { return {0, c.model().layers()}; }
  // Stage k of a pipeline of `stages` equal stages (layers must divide evenly).
  static StageRange pipeline(const Config& c, int k, int stages);

  bool has_embedding() const { return first_layer == 0; }
  bool has_head(const Config& c) const { return last_layer == c.model().layers(); }
  int layers() const { return last_layer - first_layer; }
  std::string str() const;
};

}  // namespace troupe::model
