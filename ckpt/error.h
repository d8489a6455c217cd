// The one exception type of the checkpoint library. Its message is the whole
// user-facing error and always names the file (or directory) and what is wrong
// with it, e.g. "ckpt/step_00000020/dp0_pp1.shard: size 1048576 bytes, manifest says 2097216".
#pragma once

#include <stdexcept>
#include <string>

namespace troupe::ckpt {

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace troupe::ckpt
