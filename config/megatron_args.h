// Importing a Megatron-LM argument fragment (`--megatron-args FILE`).
//
// The fragment holds flags as Megatron's pretrain_gpt.py takes them: one or more
// per line, "--flag value" or "--flag=value", '#' starts a comment, a trailing
// '\' (from a shell script) is ignored. The Config starts from the proto
// defaults (messages/config.proto), not from Megatron's defaults; each flag
// sets the field it names. docs/configuration.md lists every flag.
//
// Flags that select behaviour troupe always has (--bf16, --use-distributed-optimizer,
// --overlap-grad-reduce, ...) are accepted; those that take a value are checked
// (--optimizer must be adam, --weight-decay-incr-style constant, ...). Every flag
// troupe does not support is listed in one ConfigError, never ignored.
//
// Data parallelism is not a Megatron flag (Megatron derives it from the world
// size): troupe reads `--data-parallel-size N`, its one addition; without it DP is
// the proto default, 1.
#pragma once

#include <string>
#include <string_view>

#include "config/text_format.h"

namespace troupe::config {

// Parses without validating; origins read "<source>:<line> (--flag)".
ParsedConfig parse_megatron_args(std::string_view text, const std::string& source_name);
ParsedConfig parse_megatron_args_file(const std::string& path);

}  // namespace troupe::config
