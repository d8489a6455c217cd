// Rendezvous stores: where the members of a group publish their addresses before they
// connect (Gloo's connectFullMesh reads and writes through one). A store is a set-once
// key/value map that members can wait on. Implementations here: a directory shared by
// the processes (DirectoryStore) and a map inside one process (MemoryStore); the
// supervisor adds one over its actor messages.
//
// Keys are set once. Setting a key that exists throws CommError: it means two jobs (or
// two generations of one job) share a prefix, and their addresses would mix. Every job
// and every rebuild after a failure takes a fresh prefix.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace troupe::comm {

// A wait that ran out of time; `missing` lists the keys that never appeared.
class StoreTimeout : public CommError {
 public:
  StoreTimeout(const std::string& what, std::vector<std::string> missing)
      : CommError(what), missing_(std::move(missing)) {}
  const std::vector<std::string>& missing() const { return missing_; }

 private:
  std::vector<std::string> missing_;
};

class Store {
 public:
  virtual ~Store() = default;

  // Publishes `value` under `key`. Throws CommError when the key exists already.
  virtual void set(const std::string& key, std::span<const char> value) = 0;

  // Returns once every key exists; StoreTimeout naming the missing keys after `timeout`.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;

  // The value of `key`, waiting for it up to `timeout` (StoreTimeout after that).
  virtual std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) = 0;

  // For error messages: "directory /tmp/x", "in-memory store".
  virtual std::string describe() const = 0;
};

// One file per key in a directory that every member can read (a local or shared file
// system). A value is written to a temporary name, fsynced, and published with link(2),
// which fails when the key exists: set-once holds even between processes.
class DirectoryStore final : public Store {
 public:
  // Creates `dir` (and parents) when missing; throws CommError when it cannot.
  explicit DirectoryStore(std::string dir);

  void set(const std::string& key, std::span<const char> value) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::string describe() const override { return "directory " + dir_; }

  // The file that holds `key` (keys are percent-encoded into one file name).
  std::string path_of(const std::string& key) const;

 private:
  std::string dir_;
};

// A map in one process, for members that are threads of it (tests, a worker hosting
// several ranks). Thread-safe.
class MemoryStore final : public Store {
 public:
  void set(const std::string& key, std::span<const char> value) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::string describe() const override { return "in-memory store"; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<char>> values_;
};

}  // namespace troupe::comm
