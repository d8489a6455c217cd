// A pipeline cut computes exactly what the whole model computes: stages chained by
// hand (activations forward, input gradients backward, several microbatches in
// flight in separate slots) give the whole model's loss and gradients. Every
// gradient is bitwise equal except the tied embedding, whose two halves (embedding
// on the first stage, LM head on the last) are summed in a different order: there
// the tolerance is 1e-6 of the tensor's largest gradient (one fp32 reassociation).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_device.h"
#include "model/gpt_stage.h"
#include "test/model/test_configs.h"

using namespace troupe;
using namespace troupe::testing;

TEST_CASE("stages [0,1) [1,2) [2,3) chained by hand equal the whole 3-layer model") {
  Config c = tiny_config();
  c.mutable_model()->set_layers(3);
  c.mutable_model()->set_init_std(0.2f);
  kernels::cpu::CpuDevice dev(2);
  const auto mbs = packed_batches();
  const int m = int(mbs.size());
  const int BT = mbs[0].batch * mbs[0].seq, D = c.model().width();

  model::GptStage whole(c, model::StageRange::whole(c), dev, 1);
  whole.zero_grads();
  double whole_loss = 0;
  int64_t whole_tokens = 0;
  for (const auto& mb : mbs) {
    const auto l = whole.forward(0, mb);
    whole.backward(0);
    whole_loss += l.loss_sum;
    whole_tokens += l.loss_tokens;
  }

  std::vector<std::unique_ptr<model::GptStage>> st;
  for (int k = 0; k < 3; ++k) {
    st.push_back(std::make_unique<model::GptStage>(c, model::StageRange::pipeline(c, k, 3), dev, m));
    st.back()->zero_grads();
  }
  // All forwards, then all backwards (slot = microbatch), backwards in microbatch
  // order as 1F1B runs them: the embedding gradient adds token rows in call order, so
  // the same order is what makes it bitwise equal to the whole model.
  double pp_loss = 0;
  int64_t pp_tokens = 0;
  for (int i = 0; i < m; ++i) {
    st[0]->forward(i, mbs[size_t(i)]);
    std::vector<float> h1 = to_host(dev, st[0]->output(i), int64_t(BT) * D);
    st[1]->forward(i, mbs[size_t(i)], h1.data());
    const auto l = st[2]->forward(i, mbs[size_t(i)], st[1]->output(i));
    pp_loss += l.loss_sum;
    pp_tokens += l.loss_tokens;
  }
  for (int i = 0; i < m; ++i) {
    st[2]->backward(i);
    st[1]->backward(i, st[2]->input_grad(i));
    st[0]->backward(i, st[1]->input_grad(i));
  }
  CHECK(pp_loss == whole_loss);
  CHECK(pp_tokens == whole_tokens);

  const auto wg = to_host(dev, whole.grads(), whole.param_count());
  std::vector<std::vector<float>> sg;
  for (auto& s : st) sg.push_back(to_host(dev, s->grads(), s->param_count()));
  int compared = 0;
  for (int k = 0; k < 3; ++k)
    for (const auto& t : st[size_t(k)]->registry().tensors()) {
      if (t.name == "wte.weight") continue;
      const auto& w = whole.registry().at(t.name);
      CAPTURE(t.name);
      CHECK(std::memcmp(&sg[size_t(k)][size_t(t.offset)], &wg[size_t(w.offset)], size_t(t.numel) * sizeof(float)) == 0);
      ++compared;
    }
  CHECK(compared == int(whole.registry().tensors().size()) - 1);

  // Tied embedding: the runtime sums first.wte + last.wte.
  const auto& w = whole.registry().at("wte.weight");
  const auto& a = st[0]->registry().at("wte.weight");
  const auto& b = st[2]->registry().at("wte.weight");
  double gmax = 0, d = 0;
  for (int64_t i = 0; i < w.numel; ++i) {
    const float sum = sg[0][size_t(a.offset + i)] + sg[2][size_t(b.offset + i)];
    gmax = std::max(gmax, double(std::fabs(wg[size_t(w.offset + i)])));
    d = std::max(d, double(std::fabs(sum - wg[size_t(w.offset + i)])));
  }
  CHECK(gmax > 0);
  CHECK(d <= 1e-6 * gmax);
  // Each half alone is far from the total: both paths matter.
  double half = 0;
  for (int64_t i = 0; i < w.numel; ++i) half = std::max(half, double(std::fabs(sg[0][size_t(a.offset + i)] - wg[size_t(w.offset + i)])));
  CHECK(half > 1e-3 * gmax);
}
