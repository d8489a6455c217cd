#include "model/stage_range.h"

#include <stdexcept>

namespace troupe::model {

StageRange StageRange::pipeline(const Config& c, int k, int stages) {
  const int layers = c.model().layers();
  if (stages < 1 || layers % stages != 0)
    throw std::invalid_argument("model.layers " + std::to_string(layers) +
                                " does not divide into " + std::to_string(stages) + " pipeline stages");
  if (k < 0 || k >= stages)
    throw std::invalid_argument("pipeline stage " + std::to_string(k) + " is outside [0, " +
                                std::to_string(stages) + ")");
  const int per = layers / stages;
  return {k * per, (k + 1) * per};
}

std::string StageRange::str() const {
  return "layers [" + std::to_string(first_layer) + ", " + std::to_string(last_layer) + ")";
}

}  // namespace troupe::model
