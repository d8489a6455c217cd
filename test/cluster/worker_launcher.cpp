#include "test/cluster/worker_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace troupe::testing {

pid_t launch_process(const std::string& binary, const std::vector<std::string>& args, const std::string& log,
                     const std::string& cwd) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());  // after opening `log`
  std::vector<std::string> all{binary};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, binary.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("cannot start " + binary + ": " + std::strerror(rc));
  return pid;
}

int reap_process(pid_t pid, std::chrono::milliseconds timeout, bool* killed) {
  if (killed) *killed = false;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (killed) *killed = true;
  ::kill(pid, SIGCONT);
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

std::vector<std::string> worker_args(uint16_t port, const std::string& secret_file, int heartbeat_ms,
                                     int timeout_ms) {
  return {"worker",
          "--connect",
          "127.0.0.1:" + std::to_string(port),
          "--secret-file",
          secret_file,
          "--heartbeat-ms",
          std::to_string(heartbeat_ms),
          "--connection-timeout-ms",
          std::to_string(timeout_ms),
          "--connect-timeout",
          "30"};
}

std::string tail_of(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::deque<std::string> last;
  for (std::string line; std::getline(in, line);) {
    last.push_back(line);
    if (last.size() > lines) last.pop_front();
  }
  std::string out;
  for (const auto& l : last) out += l + "\n";
  return out;
}

}  // namespace troupe::testing
