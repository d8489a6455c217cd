// How a Rank crosses between processes (CAF 0.17 inspect): shared by the training
// messages (wire_types.h) and the cluster protocol (cluster_protocol.h).
#pragma once

#include <caf/all.hpp>

#include "messages/rank.h"

namespace troupe {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Rank& x) {
  return f(caf::meta::type_name("troupe::Rank"), x.dp, x.pp, x.tp);
}

}  // namespace troupe
