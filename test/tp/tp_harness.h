// Test helpers for tensor parallelism: a group of GptStage ranks built by hand (one
// CPU device and one thread per rank, an in-process communicator), parameters copied
// from a whole model by their boxes, and the slices of a buffer assembled back into
// whole named tensors.
#pragma once

#include <doctest/doctest.h>

#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/inprocess.h"
#include "kernels/cpu/cpu_device.h"
#include "model/gpt_stage.h"
#include "test/support/on_ranks.h"

namespace troupe::testing {


// T tensor-parallel ranks of one stage (T = 1: a plain stage without a group).
struct TpStages {
  std::vector<std::unique_ptr<kernels::cpu::CpuDevice>> devices;
  std::vector<std::unique_ptr<model::GptStage>> ranks;

  TpStages(const Config& c, model::StageRange range, int T, bool sequence_parallel, int slots = 1,
           int threads = 1, std::vector<std::shared_ptr<comm::Communicator>> group = {}) {
    if (T > 1 && group.empty()) group = comm::make_inprocess_group(T, "tp-test", std::chrono::milliseconds(20000));
    for (int t = 0; t < T; ++t) {
      devices.push_back(std::make_unique<kernels::cpu::CpuDevice>(threads));
      model::TensorParallel tp;
      if (T > 1) tp = {group[size_t(t)], sequence_parallel};
      ranks.push_back(std::make_unique<model::GptStage>(c, range, *devices.back(), slots,
                                                        model::StageShape::from_config(c), tp));
    }
  }
  int size() const { return int(ranks.size()); }
  model::GptStage& operator[](int t) { return *ranks[size_t(t)]; }
};

// Copies every tensor box `to` holds from the same-named whole tensor of `from`.
inline void copy_params_by_box(const model::GptStage& from, model::GptStage& to) {
  for (const auto& t : to.registry().tensors()) {
    const auto& w = from.registry().at(t.name);
    REQUIRE(w.shape == t.global_shape);
    const int64_t rows = t.shape[0], cols = t.shape.size() == 2 ? t.shape[1] : 1;
    const int64_t wcols = w.shape.size() == 2 ? w.shape[1] : 1;
    const int64_t c0 = t.shape.size() == 2 ? t.slice_start[1] : 0;
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(to.params() + t.offset + r * cols, from.params() + w.offset + (t.slice_start[0] + r) * wcols + c0,
                  size_t(cols) * sizeof(float));
  }
}

// Whole named tensors from the slices of a buffer (params or grads) of every rank.
// Elements held by several ranks (replicated tensors) must agree bitwise.
inline std::map<std::string, std::vector<float>> assemble(std::vector<model::GptStage*> ranks, bool grads) {
  std::map<std::string, std::vector<float>> out;
  std::map<std::string, std::vector<int>> seen;
  for (auto* st : ranks) {
    const float* buf = grads ? st->grads() : st->params();
    for (const auto& t : st->registry().tensors()) {
      int64_t numel = 1;
      for (auto d : t.global_shape) numel *= d;
      auto& v = out[t.name];
      auto& s = seen[t.name];
      if (v.empty()) v.assign(size_t(numel), 0.0f), s.assign(size_t(numel), 0);
      const int64_t rows = t.shape[0], cols = t.shape.size() == 2 ? t.shape[1] : 1;
      const int64_t gcols = t.global_shape.size() == 2 ? t.global_shape[1] : 1;
      const int64_t c0 = t.shape.size() == 2 ? t.slice_start[1] : 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const size_t g = size_t((t.slice_start[0] + r) * gcols + c0 + c);
          const float x = buf[t.offset + r * cols + c];
          if (s[g]) {
            CAPTURE(t.name);
            REQUIRE(std::memcmp(&v[g], &x, sizeof(float)) == 0);
          }
          v[g] = x;
          ++s[g];
        }
    }
  }
  for (auto& [name, s] : seen) {
    CAPTURE(name);
    for (int x : s) REQUIRE(x > 0);
  }
  return out;
}

}  // namespace troupe::testing
