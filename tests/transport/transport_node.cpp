// One node of a multi-process transport test, started as a real process by
// cluster_test.cpp (never by hand in CI). It hosts the actors named on its
// command line, exports them over the UCX transport, connects to peers and,
// as a driver, runs a workload against local or remote shards through the
// same typed handles. It reports on stdout, one line each:
//   PORT <port>            its listener (port 0 was asked for)
//   UP <node> / DOWN <node> <reason>
//   READY                  connected to every --connect peer
//   RUNNING                (loop) the first round succeeded
//   PASS <what> / FAIL <what>: <error>
// and exits 0 (drivers: every check passed), 1 (a check failed), 3 (loop:
// a request failed). Servers run until stdin closes.
//
// Usage: transport_node --name N --dir D [--shard I]... [--dense] [--echo]
//   [--connect HOST:PORT]... [--remote-shard I=NODE]... [--remote-dense NODE]
//   [--drive exact-sum|every-type|loop] [--shards S] [--dim D] [--keys K]
//   [--rounds R] [--in-flight F] [--heartbeat-ms T] [--no-address-exchange]
//   [--listen ADDR]
#include <unistd.h>

#include <caf/all.hpp>
#include <cmath>
#include <cstring>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>

#include "actors/cache_tier_actor.hpp"
#include "actors/dense_actor.hpp"
#include "actors/partition_map.hpp"
#include "actors/shard_actor.hpp"
#include "actors/training_protocol.hpp"
#include "tests/tiers/test_util.hpp"
#include "transport/codec.hpp"
#include "transport/remote_actors.hpp"

namespace strata {
namespace {

using namespace actors;
using transport::frame_type;

struct options {
  std::string name, dir, drive, listen = "127.0.0.1";
  std::vector<uint32_t> shards;
  bool dense = false, echo = false, address_exchange = true;
  bool cache = false;        // host a cache tier (async mode) over the shard handles
  bool via_cache = false;    // exact-sum: push and look up through the cache tier
  std::string remote_cache;  // the cache tier is on this node
  std::vector<std::string> connect;
  std::map<uint32_t, std::string> remote_shards;
  std::string remote_dense;
  uint32_t total_shards = 1, dim = 8, keys = 1000, rounds = 20, in_flight = 8;
  uint32_t heartbeat_ms = 10000;
  uint32_t corrupt_frame = 0;  // flip a payload bit of this sequenced frame (1-based); 0: none
};

std::mutex out_mu;
void say(const std::string& line) {
  std::lock_guard lock(out_mu);
  std::cout << line << std::endl;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "missing value for " << a << "\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--name")
      o.name = next();
    else if (a == "--dir")
      o.dir = next();
    else if (a == "--shard")
      o.shards.push_back(std::stoul(next()));
    else if (a == "--dense")
      o.dense = true;
    else if (a == "--echo")
      o.echo = true;
    else if (a == "--cache")
      o.cache = true;
    else if (a == "--via-cache")
      o.via_cache = true;
    else if (a == "--remote-cache")
      o.remote_cache = next();
    else if (a == "--connect")
      o.connect.push_back(next());
    else if (a == "--remote-shard") {
      auto v = next();
      auto eq = v.find('=');
      o.remote_shards[std::stoul(v.substr(0, eq))] = v.substr(eq + 1);
    } else if (a == "--remote-dense")
      o.remote_dense = next();
    else if (a == "--drive")
      o.drive = next();
    else if (a == "--shards")
      o.total_shards = std::stoul(next());
    else if (a == "--dim")
      o.dim = std::stoul(next());
    else if (a == "--keys")
      o.keys = std::stoul(next());
    else if (a == "--rounds")
      o.rounds = std::stoul(next());
    else if (a == "--in-flight")
      o.in_flight = std::stoul(next());
    else if (a == "--heartbeat-ms")
      o.heartbeat_ms = std::stoul(next());
    else if (a == "--no-address-exchange")
      o.address_exchange = false;
    else if (a == "--listen")
      o.listen = next();
    else if (a == "--corrupt-frame")
      o.corrupt_frame = std::stoul(next());
    else {
      std::cerr << "unknown option " << a << "\n";
      std::exit(2);
    }
  }
  return o;
}

shard_config make_shard_config(const options& o, uint32_t index) {
  shard_config c;
  c.index = index;
  c.table = testing::exact_sum_table(o.dim);
  // Small DRAM tier: rows move through write-behind and LMDB too.
  c.dram.capacity_bytes =
      dram_tier::budget_for_rows(c.table.layout, c.dram.policy, o.keys / 4 + 16);
  c.lmdb.directory = std::filesystem::path(o.dir) / (o.name + "-shard" + std::to_string(index));
  c.lmdb.table = c.table.name;
  c.lmdb.partitions = 64;
  c.lmdb.map_bytes = size_t{1} << 30;
  c.flush_batch_rows = 64;
  return c;
}

// The increment key k gets in round r, element e: a small integer, so
// every sum is exact in float (docs/architecture.md, Semantics: The
// exact-sum test).
float increment(uint64_t key, uint32_t round, uint32_t element) {
  return static_cast<float>((key * 31 + round * 7 + element) % 5 + 1);
}

struct cluster_handles {
  std::vector<shard_actor> shards;
  dense_actor dense;
  cache_tier_actor cache;
};

// Pushes `rounds` rounds of increments to every shard (in_flight requests
// outstanding), then pulls every key and checks it equals the exact sum.
bool drive_exact_sum(caf::actor_system& system, const options& o, const cluster_handles& c,
                     bool loop) {
  caf::scoped_actor self{system};
  partition_map map(64, o.total_shards);
  std::vector<uint64_t> keys(o.keys);
  for (uint32_t i = 0; i < o.keys; ++i) keys[i] = 1000003ull * i + 17;
  std::vector<std::vector<uint64_t>> by_shard(o.total_shards);
  for (auto k : keys) by_shard[map.shard_of(k)].push_back(k);
  std::map<uint64_t, std::vector<double>> expected;
  for (auto k : keys) expected[k].assign(o.dim, 0);

  std::string failure;
  uint64_t requests = 0;
  for (uint32_t round = 0; loop || round < o.rounds; ++round) {
    using handle_t =
        decltype(self->request(c.shards[0], caf::infinite, push_atom::value, push_request{}));
    std::vector<handle_t> waiting;
    if (o.via_cache) {
      // One push of every shard's keys to the cache tier, which splits it
      // per shard and forwards it (async mode) through the proxies.
      push_request req;
      for (uint32_t s = 0; s < o.total_shards; ++s) {
        for (size_t i = round % 2; i < by_shard[s].size(); i += 2)
          req.keys.push_back(by_shard[s][i]);
      }
      for (auto k : req.keys) {
        for (uint32_t e = 0; e < o.dim; ++e) {
          req.grads.push_back(-increment(k, round, e));
          expected[k][e] += increment(k, round, e);
        }
      }
      std::optional<push_ack> ack;
      self->request(c.cache, caf::infinite, push_atom::value, std::move(req))
          .receive([&](push_ack& a) { ack = std::move(a); },
                   [&](caf::error& e) { failure = system.render(e); });
      ++requests;
      if (!failure.empty()) {
        say("FAIL push round " + std::to_string(round) + ": " + failure);
        return false;
      }
      if (loop && round == 0) say("RUNNING");
      continue;
    }
    for (uint32_t s = 0; s < o.total_shards; ++s) {
      push_request req;
      // Half the keys each round, the first repeated once (a duplicate).
      for (size_t i = round % 2; i < by_shard[s].size(); i += 2) req.keys.push_back(by_shard[s][i]);
      if (!req.keys.empty()) req.keys.push_back(req.keys.front());
      for (auto k : req.keys) {
        for (uint32_t e = 0; e < o.dim; ++e) {
          req.grads.push_back(-increment(k, round, e));
          expected[k][e] += increment(k, round, e);
        }
      }
      waiting.push_back(
          self->request(c.shards[s], caf::infinite, push_atom::value, std::move(req)));
      ++requests;
    }
    for (auto& w : waiting) {
      w.receive([](push_reply&) {}, [&](caf::error& e) { failure = system.render(e); });
    }
    if (!failure.empty()) {
      say("FAIL push round " + std::to_string(round) + ": " + failure);
      return false;
    }
    if (loop && round == 0) say("RUNNING");
  }
  // Pull everything back and compare.
  const auto layout = c.shards.empty() ? row_layout{} : testing::exact_sum_table(o.dim).layout;
  size_t checked = 0;
  for (uint32_t s = 0; s < o.total_shards; ++s) {
    self->request(c.shards[s], caf::infinite, pull_atom::value, by_shard[s])
        .receive(
            [&](pull_reply& r) {
              for (size_t i = 0; i < r.rows.keys.size(); ++i) {
                const auto* w = weights_of(reinterpret_cast<const std::byte*>(
                    r.rows.records.data() + i * layout.record_bytes()));
                for (uint32_t e = 0; e < o.dim; ++e) {
                  if (w[e] != expected[r.rows.keys[i]][e] && failure.empty()) {
                    failure = "key " + std::to_string(r.rows.keys[i]) + " element " +
                              std::to_string(e) + ": " + std::to_string(w[e]) + " != exact sum " +
                              std::to_string(expected[r.rows.keys[i]][e]);
                  }
                }
                ++checked;
              }
            },
            [&](caf::error& e) { failure = system.render(e); });
  }
  if (o.via_cache && failure.empty()) {
    // The cache tier's copies were refreshed from the shards' push replies.
    self->request(c.cache, caf::infinite, lookup_atom::value, keys)
        .receive(
            [&](lookup_reply& r) {
              for (size_t i = 0; i < r.rows.keys.size() && failure.empty(); ++i) {
                const auto* w = weights_of(reinterpret_cast<const std::byte*>(
                    r.rows.records.data() + i * layout.record_bytes()));
                for (uint32_t e = 0; e < o.dim; ++e) {
                  if (w[e] != expected[r.rows.keys[i]][e]) {
                    failure = "cache lookup of key " + std::to_string(r.rows.keys[i]) + ": " +
                              std::to_string(w[e]) +
                              " != " + std::to_string(expected[r.rows.keys[i]][e]);
                    break;
                  }
                }
              }
              if (r.rows.keys.size() != keys.size()) failure = "cache lookup returned too few rows";
            },
            [&](caf::error& e) { failure = system.render(e); });
  }
  if (!failure.empty() || checked != keys.size()) {
    say("FAIL exact-sum: " + (failure.empty() ? "checked " + std::to_string(checked) : failure));
    return false;
  }
  say("PASS exact-sum " + std::to_string(checked) + " keys, " + std::to_string(requests) +
      " pushes");
  return true;
}

template <class Reply, class Handle, class... Ts>
std::optional<Reply> ask(caf::scoped_actor& self, const Handle& h, std::string& failure,
                         Ts&&... xs) {
  std::optional<Reply> out;
  self->request(h, caf::infinite, std::forward<Ts>(xs)...)
      .receive([&](Reply& r) { out = std::move(r); },
               [&](caf::error& e) { failure = self->system().render(e); });
  return out;
}

// Echo a value through a remote echo target and decode it back.
template <class T>
bool echo_equal(transport::node_transport& t, const std::string& peer, const T& value,
                const std::function<bool(const T&)>& same, std::string& failure) {
  std::promise<expected<transport::inbound_frame>> done;
  auto f = done.get_future();
  auto s = t.bridge().request(
      peer, frame_type::echo, 200, transport::encode_payload(value),
      [&done](expected<transport::inbound_frame> r) { done.set_value(std::move(r)); });
  if (!s) {
    failure = s.err().to_string();
    return false;
  }
  auto r = f.get();
  if (!r) {
    failure = r.err().to_string();
    return false;
  }
  T back{};
  if (auto d = transport::decode_payload(r->payload, back); !d) {
    failure = d.err().to_string();
    return false;
  }
  if (!same(back)) failure = "value changed on the way";
  return failure.empty();
}

// Every message type crosses the process boundary: the shard's and the
// dense actor's whole interfaces through proxies, the cache tier's and
// the training protocol's types through a remote echo.
bool drive_every_type(caf::actor_system& system, transport::node_transport& t, const options& o,
                      const cluster_handles& c) {
  caf::scoped_actor self{system};
  std::string failure;
  auto check = [&](bool ok, const std::string& what) {
    if (ok && failure.empty()) {
      say("PASS " + what);
      return true;
    }
    say("FAIL " + what + ": " + (failure.empty() ? "wrong value" : failure));
    failure.clear();
    return false;
  };
  bool all = true;
  const auto& shard = c.shards.at(0);
  const auto layout = testing::exact_sum_table(o.dim).layout;
  // write_back (row_batch -> ok), then pull (pull_reply) sees that row.
  std::vector<uint64_t> keys{11, 12};
  auto records = testing::make_records(layout, keys, 41);
  row_batch rows{keys,
                 std::vector<uint8_t>(reinterpret_cast<uint8_t*>(records.data()),
                                      reinterpret_cast<uint8_t*>(records.data()) + records.size())};
  all &= check(ask<ok_atom>(self, shard, failure, write_back_atom::value, rows).has_value(),
               "shard write_back");
  auto pulled = ask<pull_reply>(self, shard, failure, pull_atom::value, keys);
  bool same_rows = pulled && pulled->rows.keys == keys && pulled->admitted.size() == keys.size();
  for (size_t i = 0; same_rows && i < keys.size(); ++i) {
    same_rows = std::memcmp(weights_of(reinterpret_cast<const std::byte*>(
                                pulled->rows.records.data() + i * layout.record_bytes())),
                            weights_of(records.data() + i * layout.record_bytes()),
                            o.dim * sizeof(float)) == 0;
  }
  all &= check(same_rows, "shard pull after write_back");
  // A cache's prefetch fill (shard_pull_ahead): the same rows, counted as
  // prefetched by the shard (stats below).
  auto ahead = ask<pull_reply>(self, shard, failure, pull_atom::value, prefetch_atom::value,
                               std::vector<uint64_t>{12, 11});
  all &=
      check(ahead && ahead->rows.keys == std::vector<uint64_t>{12, 11} && pulled &&
                ahead->rows.records.size() == pulled->rows.records.size() &&
                std::memcmp(
                    weights_of(reinterpret_cast<const std::byte*>(ahead->rows.records.data())),
                    weights_of(records.data() + layout.record_bytes()), o.dim * sizeof(float)) == 0,
            "shard pull ahead (a prefetch fill)");
  push_request push{{11}, std::vector<float>(o.dim, -1.0f), 3};
  auto pushed = ask<push_reply>(self, shard, failure, push_atom::value, push);
  all &= check(pushed && pushed->rows.keys == std::vector<uint64_t>{11}, "shard push");
  self->send(shard, prefetch_atom::value, std::vector<uint64_t>{13, 14});
  self->send(shard, tick_atom::value, uint32_t{5});
  auto stats = ask<tier_stats>(self, shard, failure, stats_atom::value);
  // prefetch and tick were sent before stats: FIFO means they were handled.
  all &= check(stats && stats->prefetch_requests >= 2 && stats->prefetch_rows >= 4 &&
                   !stats->latencies.empty() && stats->pushes == 1,
               "shard prefetch, tick, stats (tier_stats with latency snapshots)");
  all &= check(ask<ok_atom>(self, shard, failure, drain_atom::value).has_value(), "shard drain");
  if (c.dense) {
    auto step =
        ask<uint64_t>(self, c.dense, failure, push_dense_atom::value, std::vector<float>(4, 0.5f));
    all &= check(step && *step == 1, "dense push");
    auto w = ask<dense_weights>(self, c.dense, failure, pull_dense_atom::value);
    all &= check(w && w->step == 1 && w->weights.size() == 4, "dense pull");
    auto s = ask<actor_stats>(self, c.dense, failure, stats_atom::value);
    all &= check(s && s->kind == "dense", "dense stats");
    auto bad =
        ask<uint64_t>(self, c.dense, failure, push_dense_atom::value, std::vector<float>(3, 0.5f));
    // The actor's own error comes back naming the node that served it.
    const bool named = !bad && failure.find("node '") != std::string::npos &&
                       failure.find("3 gradients for 4") != std::string::npos;
    failure.clear();
    all &= check(named, "remote error text");
  }
  if (!o.remote_cache.empty()) {
    auto looked = ask<lookup_reply>(self, c.cache, failure, lookup_atom::value, keys);
    all &= check(looked && looked->rows.keys == keys, "cache lookup (lookup_reply)");
    self->send(c.cache, prefetch_atom::value, std::vector<uint64_t>{21, 22});
    auto ack = ask<push_ack>(self, c.cache, failure, push_atom::value,
                             push_request{{12}, std::vector<float>(o.dim, -1.0f), 4});
    all &= check(ack && ack->versions.size() == 1 && ack->versions[0] > 0, "cache push (push_ack)");
    all &=
        check(ask<ok_atom>(self, c.cache, failure, pass_start_atom::value, uint64_t{1}).has_value(),
              "cache pass_start");
    all &=
        check(ask<ok_atom>(self, c.cache, failure, pass_end_atom::value, uint64_t{1}).has_value(),
              "cache pass_end");
    auto cs = ask<tier_stats>(self, c.cache, failure, stats_atom::value);
    all &= check(cs && cs->kind == "cache" && cs->prefetch_requests >= 1, "cache prefetch, stats");
    all &=
        check(ask<ok_atom>(self, c.cache, failure, drain_atom::value).has_value(), "cache drain");
  }
  if (!o.remote_dense.empty()) {
    const auto& peer = o.remote_dense;
    all &= check(echo_equal<push_ack>(
                     t, peer, push_ack{{1, 2, 3}},
                     [](const push_ack& a) { return a.versions.size() == 3; }, failure),
                 "echo push_ack");
    lookup_reply lr{rows};
    all &=
        check(echo_equal<lookup_reply>(
                  t, peer, lr,
                  [&](const lookup_reply& a) { return a.rows.records == rows.records; }, failure),
              "echo lookup_reply");
    all &= check(
        echo_equal<progress_report>(
            t, peer, progress_report{1, 2, 3, 0.5},
            [](const progress_report& p) { return p.examples == 3 && p.loss_sum == 0.5; }, failure),
        "echo progress_report");
    all &= check(echo_equal<worker_result>(
                     t, peer, worker_result{1, 2, 3, 0.25, 4, true},
                     [](const worker_result& w) { return w.finished; }, failure),
                 "echo worker_result");
    all &= check(echo_equal<training_summary>(
                     t, peer, training_summary{1, 2, 3, 4, 5, 6, 7, "ckpt", false},
                     [](const training_summary& s) { return s.passes == 6; }, failure),
                 "echo training_summary");
  }
  return all;
}

int run(const options& o) {
  caf::actor_system_config cfg;
  add_message_types(cfg);
  add_training_message_types(cfg);
  cfg.set("scheduler.max-threads", size_t{2});
  caf::actor_system system{cfg};

  transport::bridge_config bc;
  bc.node_name = o.name;
  bc.listen_address = o.listen;
  bc.heartbeat_timeout = std::chrono::milliseconds(o.heartbeat_ms);
  bc.heartbeat_interval = std::chrono::milliseconds(std::max<uint32_t>(o.heartbeat_ms / 10, 50));
  bc.exchange_worker_address = o.address_exchange;
  if (o.corrupt_frame != 0) {
    bc.outgoing_fault = [n = o.corrupt_frame](transport::frame_header& h,
                                              std::vector<std::byte>& payload) {
      if (h.seq == n && !payload.empty()) payload[payload.size() / 2] ^= std::byte{0x10};
    };
  }
  auto t = transport::node_transport::start(
      system, bc, [](const std::string& peer, bool up, const std::string& reason) {
        say(up ? "UP " + peer : "DOWN " + peer + " " + reason);
      });
  if (!t) {
    say("FAIL start: " + t.err().to_string());
    return 1;
  }
  auto& transport = **t;
  say("PORT " + std::to_string(transport.bridge().port()));

  cluster_handles c;
  c.shards.resize(o.total_shards);
  for (auto index : o.shards) {
    auto shard = spawn_shard(system, make_shard_config(o, index));
    if (!shard) {
      say("FAIL shard " + std::to_string(index) + ": " + shard.err().to_string());
      return 1;
    }
    c.shards[index] = *shard;
    transport.export_shard(index, *shard);
  }
  if (o.dense) {
    c.dense = *spawn_dense(system, dense_config{}, std::vector<float>(4, 0.f));
    transport.export_dense(100, c.dense);
  }
  if (o.echo) transport.export_echo(200);
  for (const auto& hp : o.connect) {
    const auto colon = hp.rfind(':');
    auto peer = transport.bridge().connect(hp.substr(0, colon),
                                           static_cast<uint16_t>(std::stoul(hp.substr(colon + 1))),
                                           std::chrono::seconds(30));
    if (!peer) {
      say("FAIL connect: " + peer.err().to_string());
      return 1;
    }
  }
  for (auto& [index, peer] : o.remote_shards) c.shards[index] = transport.remote_shard(peer, index);
  if (!o.remote_dense.empty()) c.dense = transport.remote_dense(o.remote_dense, 100);
  if (o.cache) {
    cache_config cc;
    cc.table = testing::exact_sum_table(o.dim);
    cc.geometry.sets = 256;  // 8192 rows
    auto spawned = spawn_cache_tier(system, cc, training_mode::async, c.shards,
                                    partition_map(64, o.total_shards));
    if (!spawned) {
      std::fprintf(stderr, "transport_node: %s\n", spawned.err().to_string().c_str());
      return 2;
    }
    c.cache = *spawned;
    transport.export_cache(300, c.cache);
  }
  if (!o.remote_cache.empty()) c.cache = transport.remote_cache(o.remote_cache, 300);
  say("READY");

  int rc = 0;
  if (o.drive == "exact-sum") {
    rc = drive_exact_sum(system, o, c, false) ? 0 : 1;
  } else if (o.drive == "every-type") {
    rc = drive_every_type(system, transport, o, c) ? 0 : 1;
  } else if (o.drive == "loop") {
    rc = drive_exact_sum(system, o, c, true) ? 0 : 3;
  } else {
    std::string line;
    while (std::getline(std::cin, line)) {
    }
  }
  // Drain local shards (every dirty row written down) before stopping.
  {
    caf::scoped_actor self{system};
    if (o.cache) {
      self->request(c.cache, std::chrono::seconds(60), drain_atom::value)
          .receive([](ok_atom) {}, [](caf::error&) {});
    }
    for (auto index : o.shards) {
      self->request(c.shards[index], std::chrono::seconds(60), drain_atom::value)
          .receive([](ok_atom) {}, [](caf::error&) {});
    }
  }
  for (const auto& p : transport.bridge().stats().peers) {
    say("PEER " + p.name + " path=" + (p.shared_memory_path ? "worker-address" : "listener") +
        " sent=" + std::to_string(p.frames_sent) +
        " received=" + std::to_string(p.frames_received) +
        " rendezvous=" + std::to_string(p.rendezvous_frames_received) +
        " rejected=" + std::to_string(p.rejected_frames) + " transports=" + p.transports);
  }
  transport.stop();
  for (auto& s : c.shards) caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  if (c.dense) caf::anon_send_exit(c.dense, caf::exit_reason::user_shutdown);
  if (c.cache) caf::anon_send_exit(c.cache, caf::exit_reason::user_shutdown);
  return rc;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  auto o = strata::parse(argc, argv);
  if (o.name.empty() || o.dir.empty()) {
    std::cerr << "usage: transport_node --name N --dir D [...] (see the source)\n";
    return 2;
  }
  return strata::run(o);
}
