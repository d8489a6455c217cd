// A write to a socket whose peer closed raises SIGPIPE, whose default action kills the
// process: exactly when a peer dies, or when a stranger hangs up mid-handshake. Code
// that writes to sockets it does not fully control (Gloo's writev, OpenSSL's TLS
// writes) calls this first: with the signal ignored the write fails with EPIPE and
// becomes an ordinary error. A handler the application installed is left alone.
#pragma once

namespace troupe::util {

void ignore_sigpipe();

}  // namespace troupe::util
