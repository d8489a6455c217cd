#include "engine/run_state.h"

#include <algorithm>

#include "config/derived.h"
#include "engine/rollback.h"

namespace troupe::engine {

bool merge_skip_samples(std::vector<int64_t>& skip, std::span<const int64_t> ids) {
  std::sort(skip.begin(), skip.end());
  skip.erase(std::unique(skip.begin(), skip.end()), skip.end());
  const size_t held = skip.size();
  skip.insert(skip.end(), ids.begin(), ids.end());
  std::sort(skip.begin(), skip.end());
  skip.erase(std::unique(skip.begin(), skip.end()), skip.end());
  return skip.size() > held;
}

RunState RunState::of(const Config& c) {
  RunState s;
  merge_skip_samples(s.skip_samples, std::span<const int64_t>(c.data().skip_samples().data(),
                                                              size_t(c.data().skip_samples_size())));
  s.resume_from = c.checkpoint().load();
  s.physical_replicas = config::physical_replicas(c);
  return s;
}

bool RunState::add_skips(std::span<const int64_t> ids) { return merge_skip_samples(skip_samples, ids); }

bool RunState::add_checkpoint_skips(const CheckpointManifest& m) {
  const auto& listed = m.data_position().skip_samples();
  return add_skips(std::span<const int64_t>(listed.data(), size_t(listed.size())));
}

void RunState::roll_back(const RollbackRequest& r, const RollbackDone& d) {
  add_skips(r.skip_ids);
  resume_from = d.target_dir;
  ++rollbacks;
}

}  // namespace troupe::engine
