// Where each field of a Config came from, so that an error can point at it.
// Field paths are dotted, with an index for repeated fields:
// "batch.global_batch_size", "faults.fault[1].actor".
#pragma once

#include <map>
#include <string>

namespace troupe::config {

class Origins {
 public:
  // `source` names the input as a whole ("configs/x.textproto", "embedded default").
  explicit Origins(std::string source = "proto defaults") : source_(std::move(source)) {}

  // Records (or replaces, for a later override) where `field_path` was set:
  // "configs/x.textproto:12", "--set batch.seq_length=128", ...
  void set(const std::string& field_path, std::string location);

  // The location of `field_path`; else that of its nearest recorded ancestor
  // (a fault block for a field left unset inside it); else the source itself.
  std::string where(const std::string& field_path) const;

  // True when `field_path` itself was set explicitly somewhere.
  bool has(const std::string& field_path) const { return at_.count(field_path) > 0; }

  const std::string& source() const { return source_; }
  void set_source(std::string source) { source_ = std::move(source); }

 private:
  std::string source_;
  std::map<std::string, std::string> at_;
};

}  // namespace troupe::config
