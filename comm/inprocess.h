// In-process communicators: the members of a group are threads of one process and
// exchange data through each other's buffers (no copies beyond the collective's own).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace troupe::comm {

// Creates a group of `size` members; element r is rank r's communicator. A member
// blocked longer than `timeout` waiting for the others raises CommError.
std::vector<std::shared_ptr<Communicator>> make_inprocess_group(
    int size, std::string name,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(120000));

}  // namespace troupe::comm
