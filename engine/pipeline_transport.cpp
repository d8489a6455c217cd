#include "engine/pipeline_transport.h"

#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

namespace troupe::engine {
namespace {

// Tags of the pipeline-neighbour communicators: one FIFO per direction and kind.
enum PipelineTag : int { kForwardTag = 1, kEvalTag = 2, kBackwardTag = 3 };

int forward_tag(msg::StepKind kind) { return kind == msg::StepKind::Eval ? kEvalTag : kForwardTag; }

// The neighbour's member index in each pipeline-neighbour communicator's pair
// (RankComms): the previous stage is member 0 of its pair (this rank member 1), the
// next stage member 1 of its pair (this rank member 0).
constexpr int kPrevPeer = 0, kNextPeer = 1;

}  // namespace

PipelineTransport::PipelineTransport(std::string path, std::shared_ptr<StageWorker> worker,
                                     std::shared_ptr<comm::Communicator> prev,
                                     std::shared_ptr<comm::Communicator> next)
    : path_(std::move(path)), worker_(std::move(worker)), prev_(std::move(prev)), next_(std::move(next)) {}

msg::Activations PipelineTransport::send_forward(msg::StepKind kind, int32_t mb, const data::Microbatch& batch,
                                                 int32_t chunk) {
  if (!next_remote_) return handle(worker_->output(mb, chunk), batch);
  return send_via_comm(next_, kNextPeer, forward_tag(kind), worker_->output(mb, chunk),
                       worker_->activation_rows(batch), kind == msg::StepKind::Eval);
}

msg::Activations PipelineTransport::send_backward(int32_t mb, const data::Microbatch& batch, int32_t chunk) {
  if (!prev_remote_) return handle(worker_->input_grad(mb, chunk), batch);
  return send_via_comm(prev_, kPrevPeer, kBackwardTag, worker_->input_grad(mb, chunk),
                       worker_->activation_rows(batch), false);
}

void PipelineTransport::arrived_forward(msg::StepKind kind, msg::Activations& x) {
  if (x.via_comm) receive_via_comm(x, prev_, kPrevPeer, forward_tag(kind));
}

void PipelineTransport::arrived_backward(msg::Activations& dx) {
  if (dx.via_comm) receive_via_comm(dx, next_, kNextPeer, kBackwardTag);
}

const float* PipelineTransport::recv_forward(msg::StepKind kind, const msg::Activations& x) {
  return input_of(x, prev_, kPrevPeer, forward_tag(kind), StageWorker::Inbox::kActivations);
}

const float* PipelineTransport::recv_backward(const msg::Activations& dx) {
  return input_of(dx, next_, kNextPeer, kBackwardTag, StageWorker::Inbox::kGradients);
}

// Over Gloo (host memory) once the device has finished writing the values; over a
// device communicator issued on the device, nothing waited for: the receiver's own
// receive waits there. The output slot then stays unchanged until the peer has
// received it, since the slot is reused only after the backward that the peer's
// gradient enables; evaluation has no such backward, so `eval` makes the device's
// later work wait for the send.
msg::Activations PipelineTransport::send_via_comm(const std::shared_ptr<comm::Communicator>& comm, int peer,
                                                  int tag, const float* data, int64_t rows, bool eval) {
  if (!comm)
    throw std::logic_error(path_ + ": a pipeline neighbour lives in another process but no communicator connects them");
  const int64_t cols = worker_->width();
  const std::span<const float> values{data, size_t(rows * cols)};
  if (comm->on_device()) {
    comm->issue_send(values, peer, tag);
    if (eval) comm->device_waits_for_issued();
  } else {
    worker_->finish_device_work();
    comm->send(values, peer, tag);
  }
  msg::Activations a;
  a.rows = rows;
  a.cols = cols;
  a.via_comm = true;
  return a;
}

// A device communicator receives only when the op runs (input_of).
void PipelineTransport::receive_via_comm(msg::Activations& a, const std::shared_ptr<comm::Communicator>& comm,
                                         int peer, int tag) {
  if (!comm)
    throw std::logic_error(path_ + ": values came from another process but no pipeline communicator connects them");
  if (comm->on_device()) return;
  auto owned = std::make_shared<std::vector<float>>(size_t(a.rows * a.cols));
  comm->recv(*owned, peer, tag);
  a.data = owned->data();
  a.owner = std::move(owned);
}

const float* PipelineTransport::input_of(const msg::Activations& a, const std::shared_ptr<comm::Communicator>& comm,
                                         int peer, int tag, StageWorker::Inbox side) {
  if (a.data) return a.data;
  float* inbox = worker_->inbox(side, a.rows * a.cols);
  comm->issue_recv({inbox, size_t(a.rows * a.cols)}, peer, tag);
  return inbox;
}

msg::Activations PipelineTransport::handle(const float* data, const data::Microbatch& batch) const {
  msg::Activations a;
  a.rows = worker_->activation_rows(batch);
  a.cols = worker_->width();
  a.data = data;
  a.owner = worker_;
  return a;
}

}  // namespace troupe::engine
