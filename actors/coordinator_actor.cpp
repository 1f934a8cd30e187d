#include "actors/coordinator_actor.hpp"

#include <algorithm>
#include <caf/all.hpp>
#include <chrono>
#include <string>

#include "actors/coordinator_internal.hpp"
#include "actors/error.hpp"

namespace strata::actors {

void add_training_message_types(caf::actor_system_config& config) {
  config.add_message_type<worker_result>("strata::worker_result");
  config.add_message_type<training_summary>("strata::training_summary");
  config.add_message_type<scale_result>("strata::scale_result");
  config.add_message_type<cluster_status>("strata::cluster_status");
}

namespace coordinator_impl {

void fail(coordinator_pointer self, caf::error err) {
  auto& st = self->state;
  if (st.failed) return;
  st.failed = true;
  if (st.scaling) {
    st.scaling->promise.deliver(err);
    st.scaling.reset();
  }
  if (st.run) {
    st.run->deliver(err);
    st.run.reset();
  }
  if (st.relocation) {  // waiting for a cut, or under way
    st.relocation->promise.deliver(err);
    st.relocation.reset();
  }
  for (auto& p : st.on_demand) p.deliver(err);
  for (auto& p : st.on_demand_writing) p.deliver(err);
  st.on_demand.clear();
  st.on_demand_writing.clear();
}

caf::error io_failure(const error& e) {
  return caf::make_error(caf::sec::runtime_error, e.to_string());
}

}  // namespace coordinator_impl

namespace {

using namespace coordinator_impl;

coordinator_actor::behavior_type coordinator_behavior(coordinator_pointer self, training_mode mode,
                                                      uint64_t pass_batches,
                                                      coordinator_peers peers, progress_sink sink,
                                                      checkpoint_plan plan) {
  auto& st = self->state;
  st.mode = mode;
  st.pass_batches = pass_batches;
  st.peers = std::move(peers);
  st.sink = std::move(sink);
  st.finished.assign(st.peers.workers.size(), false);
  st.bad_lines.assign(st.peers.workers.size(), 0);
  st.plan = std::move(plan);
  st.epoch = std::max<uint64_t>(st.plan.first_epoch, 1);
  st.positions = st.plan.positions;
  st.positions.resize(st.peers.workers.size(), 0);
  st.last_cut = st.positions;
  // An exit (a linked shard's crash, the cluster's stop) answers every
  // request still waiting first: a runner waiting for `run` with no timeout
  // would otherwise wait forever for a coordinator that is gone.
  self->set_exit_handler([self](caf::exit_msg& msg) {
    if (!msg.reason || msg.reason == caf::exit_reason::normal) return;
    fail(self, caf::make_error(caf::sec::runtime_error,
                               "the coordinator stopped: " + describe(self->system(), msg.reason)));
    self->quit(msg.reason);
  });
  return {
      [self](checkpoint_atom) -> caf::typed_response_promise<std::string> {
        auto& s = self->state;
        auto promise = self->make_response_promise<std::string>();
        if (!s.plan.settings.enabled())
          promise.deliver(
              caf::make_error(caf::sec::invalid_argument,
                              "cluster '" + s.plan.cluster +
                                  "' has no checkpoint directory (manifest: checkpoint.dir)"));
        else if (s.failed)
          promise.deliver(caf::make_error(caf::sec::runtime_error, "training has failed"));
        else if (s.ended)
          promise.deliver(caf::make_error(caf::sec::invalid_argument,
                                          "training has ended: checkpoints are taken at cuts of "
                                          "a run (the final one at the stop)"));
        else
          s.on_demand.push_back(promise);  // taken at the next cut
        return promise;
      },
      [self](stop_atom) { self->state.stop_requested = true; },
      [self](idle_atom) { async_round(self); },
      [self](tick_atom) {
        auto& s = self->state;
        s.due = true;
        if (s.plan.settings.interval_seconds != 0)
          self->delayed_send(self, std::chrono::seconds(s.plan.settings.interval_seconds),
                             tick_atom::value);
      },
      [self](stats_atom) {
        return actor_stats{"coordinator", 0, static_cast<uint64_t>(self->mailbox().size())};
      },
      [self](scale_atom, uint32_t target) -> caf::typed_response_promise<scale_result> {
        return start_scale(self, target);
      },
      [self](scale_atom, uint32_t target, const std::vector<std::string>& placement)
          -> caf::typed_response_promise<scale_result> {
        return start_scale(self, target, placement);
      },
      [self](drain_atom, const std::vector<uint32_t>& indices,
             const std::vector<std::string>& destinations)
          -> caf::typed_response_promise<scale_result> {
        return start_drain(self, indices, destinations);
      },
      [self](relocate_atom, const std::vector<uint32_t>& workers,
             const std::vector<uint32_t>& caches) -> caf::typed_response_promise<ok_atom> {
        return start_relocation(self, workers, caches);
      },
      [self](map_atom) -> cluster_status {
        auto& s = self->state;
        cluster_status out;
        out.routing = routing_of(s.plan.map, s.peers.shards);
        out.state = s.failed           ? "failed"
                    : s.ended          ? "finished"
                    : !s.run           ? "idle"
                    : s.stop_requested ? "stopping"
                                       : "training";
        out.batches = s.progress.batches;
        out.examples = s.progress.examples;
        out.recent_loss = s.progress.recent_loss;
        out.passes = s.summary.passes;
        out.checkpoints = s.summary.checkpoints;
        out.last_checkpoint = s.summary.last_checkpoint;
        out.scaling_to = s.scaling ? s.scaling->next.shards() : 0;
        out.workers = static_cast<uint32_t>(s.peers.workers.size());
        for (const auto& c : s.peers.caches) out.caches.push_back(caf::actor_cast<caf::actor>(c));
        out.relocated_workers = s.relocated_workers;
        out.relocated_caches = s.relocated_caches;
        return out;
      },
      [self](run_atom) -> caf::typed_response_promise<training_summary> {
        auto& s = self->state;
        auto promise = self->make_response_promise<training_summary>();
        if (s.run || s.summary.batches != 0 || s.failed) {
          promise.deliver(
              caf::make_error(caf::sec::invalid_argument, "coordinator: training already ran"));
          return promise;
        }
        s.run = promise;
        if (s.plan.settings.enabled() && s.plan.settings.interval_seconds != 0)
          self->delayed_send(self, std::chrono::seconds(s.plan.settings.interval_seconds),
                             tick_atom::value);
        if (s.mode == training_mode::pass)
          start_pass(self);
        else
          async_round(self);
        return promise;
      },
      [self](progress_atom, const progress_report& report) { on_progress(self, report); },
  };
}

}  // namespace

coordinator_actor spawn_coordinator(caf::actor_system& system, training_mode mode,
                                    uint64_t pass_batches, coordinator_peers peers,
                                    progress_sink sink, checkpoint_plan plan) {
  return system.spawn(coordinator_behavior, mode, pass_batches, std::move(peers), std::move(sink),
                      std::move(plan));
}

}  // namespace strata::actors
