// How a stage's activations and their gradients reach its pipeline neighbours, without
// actors: which of three carriers takes them, and where an op reads what came.
//   same process   a pointer into the sender's slot (msg::Activations::data; `owner`
//                  keeps the stage alive); the actor hands the message over once the
//                  device has written the slot (actors/send_when_done.h)
//   Gloo p2p       another process over a host communicator: the values, sent once the
//                  device has finished writing them, received into host memory as the
//                  message announcing them arrives
//   NCCL p2p       another process over a device communicator (cluster mode on GPUs):
//                  the send issued on the device, nothing waited for; the receive
//                  issued into the stage's inbox when the op that reads it runs
// With either communicator the message the actor sends carries only the shape
// (msg::Activations::via_comm). The stage actor walks its schedule and calls
// send_* after an op, arrived_* when a neighbour's message comes and recv_* when the
// op that needs the values runs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "data/batch.h"
#include "engine/stage_worker.h"
#include "messages/runtime.h"

namespace troupe::engine {

class PipelineTransport {
 public:
  // `path`: the stage's, for errors. `prev` / `next`: the pipeline-neighbour
  // communicators (RankComms::pipeline_prev / pipeline_next; null in one process).
  PipelineTransport(std::string path, std::shared_ptr<StageWorker> worker, std::shared_ptr<comm::Communicator> prev,
                    std::shared_ptr<comm::Communicator> next);

  // Whether the previous / next stage lives in another process (the actor knows from
  // their handles once wired); until told, neither does.
  void set_remote(bool prev, bool next) {
    prev_remote_ = prev;
    next_remote_ = next;
  }
  bool prev_remote() const { return prev_remote_; }
  bool next_remote() const { return next_remote_; }

  // After the forward of microbatch `mb` (not on the last stage): its output, for the
  // next stage; StageWorker::activation_rows rows (B*T, or this rank's sequence shard
  // under sequence parallelism) of width() floats. Over a device communicator an evaluation pass also makes the device's
  // later work wait for the send (no backward guards the slot then).
  // `chunk`: the model chunk the forward ran (the interleaved schedule: the last
  // stage's chunk c feeds the first stage's chunk c + 1, in this process only).
  msg::Activations send_forward(msg::StepKind kind, int32_t mb, const data::Microbatch& batch, int32_t chunk = 0);
  // After the backward of `mb` (not on the first stage's chunk 0): its input gradient,
  // for the previous virtual stage.
  msg::Activations send_backward(int32_t mb, const data::Microbatch& batch, int32_t chunk = 0);

  // A neighbour's message has arrived: over Gloo the values are received into host
  // memory now (x.data set); otherwise nothing happens.
  void arrived_forward(msg::StepKind kind, msg::Activations& x);
  void arrived_backward(msg::Activations& dx);

  // The op that reads the values runs: they are at x.data, or, over a device
  // communicator, in the stage's inbox for that side once the receive issued now has
  // landed (in device order). Receives are issued in op order, which is the order the
  // neighbour sent them in (the same schedule), so each matches its send; the inbox is
  // reused only after the op issued next has read it (one stream).
  const float* recv_forward(msg::StepKind kind, const msg::Activations& x);
  const float* recv_backward(const msg::Activations& dx);

 private:
  // Sends rows x cols values at `data` to `peer` of `comm`; returns the shape-only message.
  msg::Activations send_via_comm(const std::shared_ptr<comm::Communicator>& comm, int peer, int tag,
                                 const float* data, int64_t rows, bool eval);
  void receive_via_comm(msg::Activations& a, const std::shared_ptr<comm::Communicator>& comm, int peer, int tag);
  const float* input_of(const msg::Activations& a, const std::shared_ptr<comm::Communicator>& comm, int peer,
                        int tag, StageWorker::Inbox side);
  // A pointer into this stage's buffers (valid until the slot is rewritten).
  msg::Activations handle(const float* data, const data::Microbatch& batch) const;

  std::string path_;
  std::shared_ptr<StageWorker> worker_;
  std::shared_ptr<comm::Communicator> prev_, next_;
  bool prev_remote_ = false, next_remote_ = false;
};

}  // namespace troupe::engine
