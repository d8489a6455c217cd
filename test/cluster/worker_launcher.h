// Starting and reaping `supervisor worker` processes for the cluster tests and the
// cluster benchmark (loopback). Every process started here is reaped: waiting is
// bounded and ends with SIGKILL.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace troupe::testing {

// Starts BINARY with `args` (argv[1..]), stdout and stderr appended to `log`, in the
// directory `cwd` ("" : this process's). Throws std::runtime_error when the process
// cannot be started.
pid_t launch_process(const std::string& binary, const std::vector<std::string>& args, const std::string& log,
                     const std::string& cwd = "");

// Waits for `pid` up to `timeout`; past it sends SIGCONT + SIGKILL and reaps it.
// Returns the wait status; *killed tells whether it had to be killed.
int reap_process(pid_t pid, std::chrono::milliseconds timeout, bool* killed = nullptr);

// The arguments of a worker joining 127.0.0.1:port with `secret_file`, heartbeats
// every `heartbeat_ms` and a connection timeout of `timeout_ms`.
std::vector<std::string> worker_args(uint16_t port, const std::string& secret_file, int heartbeat_ms = 200,
                                     int timeout_ms = 2000);

// The last `lines` lines of a log file (for failure messages).
std::string tail_of(const std::string& path, size_t lines = 30);

}  // namespace troupe::testing
