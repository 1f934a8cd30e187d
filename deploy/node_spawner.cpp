#include "deploy/node_spawner.hpp"

#include <caf/all.hpp>
#include <chrono>
#include <cstdio>
#include <future>

#include "deploy/multi_node.hpp"
#include "transport/codec.hpp"

namespace strata::deploy {
namespace {

// A spawn opens an LMDB environment; a retire waits for the shard's exit.
constexpr auto spawner_timeout = std::chrono::seconds(120);

}  // namespace

node_spawner::node_spawner(const manifest& m, std::string me, transport::node_transport& transport)
    : m_(m), me_(std::move(me)), transport_(transport), homes_(m.shard_nodes) {}

node_spawner::~node_spawner() { stop(); }

void node_spawner::stop() {
  std::vector<caf::actor> spawned;
  {
    std::lock_guard lock(mu_);
    spawned.swap(spawned_here_);
  }
  for (auto& a : spawned) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

std::string node_spawner::node_of(uint32_t index) const {
  std::lock_guard lock(mu_);
  return index < homes_.size() ? homes_[index] : "";
}

std::vector<std::string> node_spawner::homes() const {
  std::lock_guard lock(mu_);
  return homes_;
}

bool node_spawner::successor_only(uint32_t index, const std::string& node) const {
  std::lock_guard lock(mu_);
  auto it = rehoming_.find(index);
  return it != rehoming_.end() && it->second.new_node == node;
}

std::filesystem::path node_spawner::directory_of(const std::string& node, uint32_t index) const {
  for (const auto& n : m_.nodes)
    if (n.name == node && !n.ssd_path.empty()) return shard_directory(n.ssd_path, index);
  return shard_directory(m_.ssd_path, index);
}

void node_spawner::export_spawner(spawn_at_fn spawn_at) {
  {
    std::lock_guard lock(mu_);
    spawn_at_ = std::move(spawn_at);
  }
  transport_.export_spawner(
      targets::spawner,
      [this](uint32_t index) -> status {
        auto spawned = spawn_here(index);
        if (!spawned) return spawned.err();
        return {};
      },
      [this](uint32_t index, std::function<void(status)> done) { retire_here(index, std::move(done)); });
}

expected<actors::shard_actor> node_spawner::spawn_here(uint32_t index) {
  spawn_at_fn spawn_at;
  {
    std::lock_guard lock(mu_);
    if (retiring_.count(index))
      return error(errc::unavailable, "shard " + std::to_string(index) +
                                          " of an earlier scale is still being retired here; "
                                          "try again");
    spawn_at = spawn_at_;
  }
  if (!spawn_at)
    return error(errc::unavailable, "node '" + me_ + "' has not joined its cluster yet");
  // A successor on a node that shares its ssd_path with the old shard's
  // node: the old environment is still open there, so another directory.
  auto dir = directory_of(me_, index);
  std::error_code ec;
  for (uint32_t generation = 2; std::filesystem::exists(dir, ec); ++generation)
    dir = directory_of(me_, index).string() + ".g" + std::to_string(generation);
  auto shard = spawn_at(index, dir);
  if (!shard)
    return error(shard.err().code(),
                 "spawning shard " + std::to_string(index) + ": " + shard.err().message());
  transport_.export_shard(targets::shard_base + index, *shard);
  std::lock_guard lock(mu_);
  if (homes_.size() <= index) homes_.resize(index + 1);
  homes_[index] = me_;
  spawned_here_.push_back(caf::actor_cast<caf::actor>(*shard));
  dirs_here_[index] = dir;
  return shard;
}

void node_spawner::retire_here(uint32_t index, std::function<void(status)> done) {
  auto dir = directory_of(me_, index);
  caf::actor shard = transport_.unexport_shard(targets::shard_base + index);
  {
    std::lock_guard lock(mu_);
    retiring_.insert(index);
    if (auto it = dirs_here_.find(index); it != dirs_here_.end()) {
      dir = it->second;
      dirs_here_.erase(it);
    }
  }
  auto remove = [this, index, dir, done] {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    {
      std::lock_guard lock(mu_);
      retiring_.erase(index);
      if (index < homes_.size() && homes_[index] == me_) homes_[index].clear();
    }
    if (ec)
      done(error(errc::io_error, "retiring shard " + std::to_string(index) + ": cannot remove " +
                                     dir.string() + ": " + ec.message()));
    else
      done({});
  };
  if (!shard) {
    remove();
    return;
  }
  // Its files go once it has exited and closed its environment.
  shard->attach_functor(remove);
  caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
}

status node_spawner::check_node(const std::string& node) const {
  std::string names;
  bool known = false;
  for (const auto& n : m_.nodes) {
    names += (names.empty() ? "" : ", ") + n.name;
    known = known || n.name == node;
  }
  if (!known)
    return error(errc::invalid_argument,
                 "no node '" + node + "' in " + m_.file.string() + " (nodes: " + names + ")");
  if (node == me_) return {};
  auto& bridge = transport_.bridge();
  if (bridge.is_up(node)) return {};
  const auto peers = bridge.peers();
  const bool seen = std::find(peers.begin(), peers.end(), node) != peers.end();
  return error(errc::unavailable, "node '" + node + "' is not connected (transport: " +
                                      (seen ? "down" : "never joined") + ")");
}

std::string node_spawner::spread() const {
  std::lock_guard lock(mu_);
  std::string best;
  size_t fewest = SIZE_MAX;
  for (const auto& n : m_.nodes) {
    if (n.name != me_ && !transport_.bridge().is_up(n.name)) continue;
    const size_t count = static_cast<size_t>(std::count(homes_.begin(), homes_.end(), n.name));
    if (count < fewest) {
      fewest = count;
      best = n.name;
    }
  }
  return best;
}

expected<actors::shard_actor> node_spawner::spawn(uint32_t index, const std::string& wanted) {
  const std::string node = wanted.empty() ? spread() : wanted;
  if (auto ok = check_node(node); !ok) return ok.err();
  return spawn_on(index, node);
}

expected<actors::shard_actor> node_spawner::spawn_successor(uint32_t index,
                                                            const std::string& node) {
  if (auto ok = check_node(node); !ok) return ok.err();
  const std::string old = node_of(index);
  if (old == node)
    return error(errc::invalid_argument, "shard " + std::to_string(index) +
                                             " already lives on node '" + node + "'");
  auto spawned = spawn_on(index, node);
  if (!spawned) {
    std::lock_guard lock(mu_);
    if (index < homes_.size()) homes_[index] = old;
    return spawned;
  }
  std::lock_guard lock(mu_);
  rehoming_[index] = rehome{old, node};
  return spawned;
}

void node_spawner::end_rehome(uint32_t index, bool keep) {
  rehome r;
  {
    std::lock_guard lock(mu_);
    auto it = rehoming_.find(index);
    if (it == rehoming_.end()) return;
    r = it->second;
    rehoming_.erase(it);
    if (!keep && index < homes_.size()) homes_[index] = r.old_node;
    if (keep && index < homes_.size()) homes_[index] = r.new_node;
  }
  retire_on(index, keep ? r.old_node : r.new_node);
}

expected<actors::shard_actor> node_spawner::spawn_on(uint32_t index, const std::string& node) {
  if (node == me_) return spawn_here(index);
  auto answer = std::make_shared<std::promise<status>>();
  auto future = answer->get_future();
  auto sent = transport_.bridge().request(
      node, transport::frame_type::spawn_shard, targets::spawner, transport::encode_payload(index),
      [answer](expected<transport::inbound_frame> r) {
        if (!r) {
          answer->set_value(r.err());
          return;
        }
        if (r->header.type == transport::frame_type::reply_error) {
          std::string text;
          (void)transport::decode_payload(r->payload, text);
          answer->set_value(error(errc::io_error, text));
          return;
        }
        answer->set_value(status{});
      });
  if (!sent) return sent.err();
  if (future.wait_for(spawner_timeout) != std::future_status::ready)
    return error(errc::unavailable, "node '" + node + "' did not answer spawning shard " +
                                        std::to_string(index) + " within 120 s");
  if (auto s = future.get(); !s) return s.err();
  {
    std::lock_guard lock(mu_);
    if (homes_.size() <= index) homes_.resize(index + 1);
    homes_[index] = node;
  }
  return transport_.remote_shard(node, targets::shard_base + index);
}

void node_spawner::retire(uint32_t index) {
  const std::string node = node_of(index);
  if (node.empty()) return;
  if (node != me_) {
    std::lock_guard lock(mu_);
    if (index < homes_.size()) homes_[index].clear();
  }
  retire_on(index, node);
}

void node_spawner::retire_on(uint32_t index, const std::string& node) {
  auto logged = [me = me_, node, index](status s) {
    if (!s)
      std::fprintf(stderr, "strata node: %s: retiring shard %u on node %s: %s\n", me.c_str(),
                   index, node.c_str(), s.err().message().c_str());
  };
  if (node == me_) {
    retire_here(index, logged);
    return;
  }
  {
    std::lock_guard lock(mu_);
    ++retires_sent_[node];
  }
  auto answered = [this, node] {
    {
      std::lock_guard lock(mu_);
      --retires_sent_[node];
    }
    retired_.notify_all();
  };
  auto sent = transport_.bridge().request(
      node, transport::frame_type::retire_shard, targets::spawner, transport::encode_payload(index),
      [logged, answered](expected<transport::inbound_frame> r) {
        if (!r) {
          logged(r.err());
        } else if (r->header.type == transport::frame_type::reply_error) {
          std::string text;
          (void)transport::decode_payload(r->payload, text);
          logged(error(errc::io_error, text));
        }
        answered();
      });
  if (!sent) {
    logged(sent.err());
    answered();
  }
}

void node_spawner::wait_retired(const std::string& node, std::chrono::seconds timeout) {
  std::unique_lock lock(mu_);
  retired_.wait_for(lock, timeout, [&] { return retires_sent_[node] <= 0; });
}

}  // namespace strata::deploy
