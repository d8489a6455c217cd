// What one process can hold, checked before anything is allocated: a run in one process
// on CPU devices keeps every rank's weights and gradients (one copy per data-parallel
// replica) and the Adam moments (sharded, once in all) in this machine's memory, and
// runs threads per rank. A config that cannot fit is refused with the numbers instead of
// dying in an allocation inside an actor.
#pragma once

#include <cstdint>
#include <string>

#include "messages/config.pb.h"

namespace troupe::engine {

// The most ranks one process runs (each has a stage, an optimizer shard and a writer
// thread); larger layouts run in cluster mode.
inline constexpr int64_t kMaxRanksInProcess = 1024;

// A lower bound on the bytes a one-process CPU run holds: parameters x (8 x DP + 8)
// (fp32 weights and gradients per replica, fp32 Adam m and v once), plus, on every
// replica, each layer's input [b, s, D] and attention probabilities [b, heads, s, s] for
// one microbatch (4 bytes each). Everything else comes on top, so a run this refuses can
// never fit.
double min_host_bytes(const Config& c);

// Throws std::invalid_argument naming the numbers when a one-process CPU run (no cluster,
// device.type CPU) has more than kMaxRanksInProcess ranks or needs more than
// `physical_bytes` of memory by min_host_bytes. physical_bytes < 0: this machine's.
void check_host_capacity(const Config& c, double physical_bytes = -1);

// The address space a one-process CPU run maps, at least: what is mapped already (the
// binary and its libraries), a stack and a malloc arena's reservation for each thread
// it starts (CAF's scheduler, a stage, an optimizer shard and a writer per rank, the
// compute pools; arenas up to glibc's cap of 8 per core), and min_host_bytes. Bytes.
double min_address_space_bytes(const Config& c);

// Under an address-space limit (ulimit -v, RLIMIT_AS) below min_address_space_bytes,
// throws std::invalid_argument naming both: a run that starts anyway fails where a
// thread or buffer cannot be had, and a thread that cannot be started inside CAF's
// scheduler aborts the process. No limit, or not a one-process CPU run: nothing.
void check_address_space(const Config& c);

}  // namespace troupe::engine
