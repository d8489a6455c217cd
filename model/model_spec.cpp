#include "model/model_spec.h"

#include <utility>

#include "config/derived.h"

namespace troupe::model {

ModelSpec::ModelSpec(const Config& c)
    : ModelSpec(c.model(), c.training().seed(), config::padded_vocab(c),
                c.parallel().schedule() == ParallelConfig::ZB_H1) {}

ModelSpec::ModelSpec(ModelConfig m, uint64_t seed, int64_t padded_vocab, bool split_backward)
    : model(std::move(m)), seed(seed), padded_vocab(padded_vocab), split_backward(split_backward) {}

}  // namespace troupe::model
