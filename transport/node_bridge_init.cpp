// Node bridge set-up: the UCX context and worker, the active-message
// handler and the listener (node_bridge_impl.hpp).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/eventfd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "transport/node_bridge_impl.hpp"

namespace strata::transport {

status node_bridge::impl::init() {
  ucp_config_t* ucp_config = nullptr;
  if (auto s = ucp_config_read(nullptr, nullptr, &ucp_config); s != UCS_OK) {
    return error(errc::unavailable, std::string("UCX config: ") + ucs_status_string(s));
  }
  // This context's setting, not the process environment (other threads
  // read it; children would inherit it), and only where the user's
  // environment chose nothing: no shared-memory transport (UCX's "sm":
  // posix, sysv, cma), so peers on one host talk over loopback TCP.
  // - posix/sysv: every sender writes into one receive FIFO per worker,
  //   reserving a slot before it copies the frame in; a peer stopped or
  //   killed between the two leaves a slot the receiver waits on forever,
  //   and the receiver then hears no one over shared memory (a SIGSTOPped
  //   node made a healthy one be marked down, docs/transport.md).
  // - cma (same-host rendezvous by process_vm_readv): UCX 1.13 aborts the
  //   whole process when the peer dies mid-transfer.
  // (The listener's address reuse is a connection-manager option that
  // ucp_config_modify does not reach in UCX 1.13: the strata binary sets
  // UCX_TCP_CM_REUSEADDR at start, deploy/main.cpp.)
  auto set_default = [&](const char* env, const char* name, const char* value) -> status {
    if (::getenv(env) != nullptr) return {};
    if (auto s = ucp_config_modify(ucp_config, name, value); s != UCS_OK) {
      ucp_config_release(ucp_config);
      return error(errc::unavailable,
                   std::string("UCX config ") + name + "=" + value + ": " + ucs_status_string(s));
    }
    return {};
  };
  STRATA_TRY(set_default("UCX_TLS", "TLS", "^sm"));
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = config.node_name.c_str();
  const auto s = ucp_init(&params, ucp_config, &context);
  ucp_config_release(ucp_config);
  if (s != UCS_OK) {
    return error(errc::unavailable, std::string("ucp_init: ") + ucs_status_string(s));
  }
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(context, &attr) == UCS_OK) {
    memory.host = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_HOST)) != 0;
    memory.cuda = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
  }
  // Only a node that moves device rows cares (a CPU cluster, a client: no).
  if (config.device_memory)
    log(memory.cuda ? "UCX supports CUDA memory: device rows go to UCX directly (GPUDirect)"
                    : "UCX has no CUDA memory support: device rows are staged through host "
                      "buffers");

  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SINGLE;  // only the progress thread touches it
  if (auto ws = ucp_worker_create(context, &wparams, &worker); ws != UCS_OK) {
    return error(errc::unavailable, std::string("ucp_worker_create: ") + ucs_status_string(ws));
  }
  ucp_address_t* address = nullptr;
  size_t address_length = 0;
  if (auto as = ucp_worker_get_address(worker, &address, &address_length); as != UCS_OK) {
    return error(errc::unavailable,
                 std::string("ucp_worker_get_address: ") + ucs_status_string(as));
  }
  const auto* a = reinterpret_cast<const uint8_t*>(address);
  worker_address.assign(a, a + address_length);
  ucp_worker_release_address(worker, address);
  if (auto es = ucp_worker_get_efd(worker, &worker_fd); es != UCS_OK) {
    return error(errc::unavailable, std::string("ucp_worker_get_efd: ") + ucs_status_string(es));
  }
  wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) return error(errc::unavailable, "eventfd failed");

  ucp_am_handler_param_t am{};
  am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  am.id = am_id;
  am.flags = UCP_AM_FLAG_WHOLE_MSG;
  am.cb = &impl::on_am;
  am.arg = this;
  if (auto hs = ucp_worker_set_am_recv_handler(worker, &am); hs != UCS_OK) {
    return error(errc::unavailable,
                 std::string("ucp_worker_set_am_recv_handler: ") + ucs_status_string(hs));
  }

  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(config.listen_port);
  if (::inet_pton(AF_INET, config.listen_address.c_str(), &sa.sin_addr) != 1) {
    return error(errc::invalid_argument,
                 "listen address '" + config.listen_address + "' is not an IPv4 address");
  }
  ucp_listener_params_t lp{};
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&sa);
  lp.sockaddr.addrlen = sizeof sa;
  lp.conn_handler.cb = &impl::on_connection;
  lp.conn_handler.arg = this;
  // A fixed port whose last connections are still in TIME_WAIT (a node
  // restarted within a minute) is busy for a while: wait for it, bounded.
  const auto busy_deadline = std::chrono::steady_clock::now() + config.listen_busy_wait;
  bool announced = false;
  for (;;) {
    const auto ls = ucp_listener_create(worker, &lp, &listener);
    if (ls == UCS_OK) break;
    if (ls != UCS_ERR_BUSY || config.listen_port == 0 ||
        std::chrono::steady_clock::now() >= busy_deadline)
      return error(errc::unavailable, "cannot listen on " + config.listen_address + ":" +
                                          std::to_string(config.listen_port) + ": " +
                                          ucs_status_string(ls));
    if (!announced) {
      log("port " + std::to_string(config.listen_port) +
          " is busy (a previous run's connections in TIME_WAIT?); retrying for up to " +
          std::to_string(
              std::chrono::duration_cast<std::chrono::seconds>(config.listen_busy_wait).count()) +
          " s");
      announced = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  ucp_listener_attr_t la{};
  la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  if (auto qs = ucp_listener_query(listener, &la); qs != UCS_OK) {
    return error(errc::unavailable, std::string("ucp_listener_query: ") + ucs_status_string(qs));
  }
  // The owner prints where it listens (node, gateway, serving): once.
  port = ntohs(reinterpret_cast<const sockaddr_in*>(&la.sockaddr)->sin_port);
  return {};
}

}  // namespace strata::transport
