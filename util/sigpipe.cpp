#include "util/sigpipe.h"

#include <signal.h>

#include <mutex>

namespace troupe::util {

void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old_action {};
    if (::sigaction(SIGPIPE, nullptr, &old_action) == 0 && old_action.sa_handler == SIG_DFL &&
        !(old_action.sa_flags & SA_SIGINFO))
      ::signal(SIGPIPE, SIG_IGN);
  });
}

}  // namespace troupe::util
