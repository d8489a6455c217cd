#include "actors/cluster/cluster_net.h"

#include <stdexcept>

#include <caf/io/all.hpp>
#include <fmt/format.h>

#include "actors/scheduler_config.h"
#include "actors/cluster/wire_types.h"

namespace troupe::actors {

void configure_network(caf::actor_system_config& cfg, const NetOptions& o) {
  configure_scheduler(cfg);
  cfg.load<caf::io::middleman>();
  cfg.set("middleman.heartbeat-interval", caf::timespan{o.heartbeat});
  cfg.set("middleman.connection-timeout", caf::timespan{o.connection_timeout});
  wire::add_wire_types(cfg);
}

std::pair<std::string, uint16_t> parse_address(const std::string& text, const std::string& flag) {
  const auto colon = text.rfind(':');
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument(fmt::format("{} {}: {} (expected ADDR:PORT, e.g. 127.0.0.1:7777)", flag, text, why));
  };
  if (colon == std::string::npos || colon == 0) throw bad("no ADDR:PORT");
  const auto port_text = text.substr(colon + 1);
  if (port_text.empty() || port_text.find_first_not_of("0123456789") != std::string::npos) throw bad("bad port");
  if (port_text.size() > 5) throw bad("port above 65535");
  const unsigned long port = std::stoul(port_text);
  if (port > 65535) throw bad("port above 65535");
  auto host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, uint16_t(port)};
}

}  // namespace troupe::actors
