// Sends a message (one value, or an atom and its arguments) that points into a
// device's memory, or says that the device got somewhere, once the device has done
// everything issued so far (kernels::Device::when_done): at once on the CPU; on a GPU
// from the device's completion callback, while the sending actor's thread goes on
// issuing work. The message goes as an anonymous send from whichever thread runs the
// callback, so a receiver must not need the sender, and should get nothing else from
// this sender whose order relative to these messages matters.
#pragma once

#include <utility>

#include <caf/all.hpp>

#include "kernels/device.h"

namespace troupe::actors {

// `to`: a typed handle (actors/actor_interfaces.h; the message is checked against its
// interface) or a caf::actor.
template <class Handle, class... Ts>
void send_when_done(kernels::Device& device, const Handle& to, Ts... xs) {
  device.when_done([to, ...xs = std::move(xs)]() mutable { caf::anon_send(to, std::move(xs)...); });
}

}  // namespace troupe::actors
