// Talking to actors from a thread CAF does not own (an HTTP server's, a
// signal thread's) through a caf::scoped_actor.
//
// Making a scoped_actor (any spawn) stores a reference to the actor
// system's logger in the calling thread's thread-local storage
// (caf::actor_system::spawn_impl, CAF 0.17), and the actor system's
// destructor waits until every such reference is gone. A server thread
// that outlives the actor system (the /metrics server serves until the
// process exits) therefore hangs the process at exit, after the report.
// A foreign_thread_scope declared before the scoped_actor drops the
// reference once the actor is gone.
#pragma once

#include <caf/logger.hpp>

namespace strata::actors {

struct foreign_thread_scope {
  foreign_thread_scope() = default;
  foreign_thread_scope(const foreign_thread_scope&) = delete;
  foreign_thread_scope& operator=(const foreign_thread_scope&) = delete;
  ~foreign_thread_scope() { caf::logger::set_current_actor_system(nullptr); }
};

}  // namespace strata::actors
