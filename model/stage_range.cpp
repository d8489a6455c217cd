#include "model/stage_range.h"

#include <algorithm>
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

StageLayers StageLayers::pipeline(const Config& c, int k) {
  return pipeline(c, k, c.parallel().pipeline(), std::max(1, c.parallel().virtual_stages()));
}

StageLayers StageLayers::pipeline(const Config& c, int k, int stages, int chunks) {
  if (chunks <= 1) return single(StageRange::pipeline(c, k, stages));
  const int layers = c.model().layers();
  if (stages < 1 || layers % (stages * chunks) != 0)
    throw std::invalid_argument("model.layers " + std::to_string(layers) + " does not divide into " +
                                std::to_string(stages) + " pipeline stages x " + std::to_string(chunks) +
                                " virtual stages (parallel.virtual_stages)");
  if (k < 0 || k >= stages)
    throw std::invalid_argument("pipeline stage " + std::to_string(k) + " is outside [0, " +
                                std::to_string(stages) + ")");
  const int per = layers / (stages * chunks);
  StageLayers out;
  for (int ch = 0; ch < chunks; ++ch) {
    const int virtual_stage = ch * stages + k;
    out.chunks.push_back({virtual_stage * per, (virtual_stage + 1) * per});
  }
  return out;
}

int StageLayers::layers() const {
  int n = 0;
  for (const auto& r : chunks) n += r.layers();
  return n;
}

std::vector<int> StageLayers::layer_ids() const {
  std::vector<int> ids;
  for (const auto& r : chunks)
    for (int l = r.first_layer; l < r.last_layer; ++l) ids.push_back(l);
  return ids;
}

int StageLayers::index_of(int layer) const {
  int before = 0;
  for (const auto& r : chunks) {
    if (layer >= r.first_layer && layer < r.last_layer) return before + layer - r.first_layer;
    before += r.layers();
  }
  return -1;
}

std::string StageLayers::str() const {
  if (chunks.size() == 1) return chunks.front().str();
  std::string s = "layers ";
  for (size_t i = 0; i < chunks.size(); ++i)
    s += (i ? " + [" : "[") + std::to_string(chunks[i].first_layer) + ", " + std::to_string(chunks[i].last_layer) + ")";
  return s;
}

std::string StageRange::str() const {
  return "layers [" + std::to_string(first_layer) + ", " + std::to_string(last_layer) + ")";
}

}  // namespace troupe::model
