#include "monitoring/catalogue.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "common/latency_histogram.hpp"

namespace strata::monitoring {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using labels = std::vector<ClientMetric::Label>;

// Families in the order they are first used; each name once.
class family_set {
 public:
  MetricFamily& family(const std::string& name, MetricType type, const std::string& help) {
    auto [it, inserted] = index_.emplace(name, families_.size());
    if (inserted) {
      MetricFamily f;
      f.name = name;
      f.help = help;
      f.type = type;
      families_.push_back(std::move(f));
    }
    return families_[it->second];
  }
  void counter(const std::string& name, const std::string& help, labels l, double value) {
    ClientMetric m;
    m.label = std::move(l);
    m.counter.value = value;
    family(name, MetricType::Counter, help).metric.push_back(std::move(m));
  }
  void gauge(const std::string& name, const std::string& help, labels l, double value) {
    ClientMetric m;
    m.label = std::move(l);
    m.gauge.value = value;
    family(name, MetricType::Gauge, help).metric.push_back(std::move(m));
  }
  void histogram(const std::string& name, const std::string& help, labels l,
                 const actors::latency_snapshot& s) {
    const auto& bounds = latency_histogram::bounds;
    if (s.counts.size() != bounds.size() + 1) return;
    ClientMetric m;
    m.label = std::move(l);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < bounds.size(); ++i) {
      cumulative += s.counts[i];
      m.histogram.bucket.push_back({cumulative, bounds[i]});
    }
    cumulative += s.counts.back();
    // The serializer adds the +Inf bucket from sample_count.
    m.histogram.sample_count = cumulative;
    m.histogram.sample_sum = s.sum_seconds;
    family(name, MetricType::Histogram, help).metric.push_back(std::move(m));
  }
  std::vector<MetricFamily> take() {
    for (auto& f : families_)
      std::stable_sort(
          f.metric.begin(), f.metric.end(),
          [](const ClientMetric& a, const ClientMetric& b) { return a.label < b.label; });
    return std::move(families_);
  }

 private:
  std::vector<MetricFamily> families_;
  std::map<std::string, size_t> index_;
};

labels with(labels base, std::initializer_list<std::pair<const char*, std::string>> more) {
  for (const auto& [name, value] : more) base.push_back({name, value});
  std::sort(base.begin(), base.end());
  return base;
}

// What each latency snapshot measures; unknown names are exported as
// strata_<name>_latency_seconds with a generic help.
std::string latency_help(const std::string& name) {
  static const std::map<std::string, std::string> known = {
      {"pull", "Time to serve a pull request (keys to rows), in seconds."},
      {"push", "Time to apply a push request (gradients to rows), in seconds."},
      {"cache_lookup", "Time of a cache tier lookup, in seconds."},
      {"lmdb_read", "Time of an LMDB read (one batch of keys), in seconds."},
      {"lmdb_write", "Time of an LMDB write transaction, in seconds."},
      {"flush", "Time from sending a flush batch to its LMDB commit, in seconds."},
  };
  auto it = known.find(name);
  return it != known.end() ? it->second : "Latency of " + name + ", in seconds.";
}

// Latency names become part of a metric name: keep [a-z0-9_] only.
std::string metric_word(const std::string& name) {
  std::string out;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    out += ok ? c : '_';
  }
  return out;
}

double d(uint64_t v) { return static_cast<double>(v); }
uint64_t minus(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

// One chain tier (or the cache) of one actor.
struct tier_counts {
  const char* tier;
  uint64_t lookups, hits, misses;
};

void add_tier(family_set& out, const labels& owner, const actors::tier_stats& t) {
  const bool shard = t.kind == "shard";
  // Lookups cascade down a shard's chain: a key missed by DRAM is looked up
  // in the write-behind buffer, then in LMDB, then initialized.
  std::vector<tier_counts> tiers;
  if (shard) {
    tiers.push_back({"dram", t.lookups, t.hits, t.misses});
    uint64_t lookups = t.misses;
    static const char* const below[] = {"write_behind", "lmdb"};
    for (size_t i = 1; i < t.chain_hits.size() && i <= 2; ++i) {
      const uint64_t hits = t.chain_hits[i];
      tiers.push_back({below[i - 1], lookups, hits, minus(lookups, hits)});
      lookups = minus(lookups, hits);
    }
  } else {
    tiers.push_back({"cache", t.lookups, t.hits, t.misses});
  }
  for (const auto& c : tiers) {
    const labels l = with(owner, {{"tier", c.tier}});
    out.counter("strata_tier_lookups_total", "Keys looked up in the tier.", l, d(c.lookups));
    out.counter("strata_tier_hits_total", "Keys the tier served.", l, d(c.hits));
    out.counter("strata_tier_misses_total", "Keys the tier did not hold (passed down).", l,
                d(c.misses));
  }
  // The resident tier (DRAM or the cache) with its capacity and policy
  // counters.
  const labels top = with(owner, {{"tier", shard ? "dram" : "cache"}});
  out.counter("strata_tier_inserts_total",
              "Rows inserted into the tier (promotions, new rows, fills).", top, d(t.inserts));
  out.counter("strata_tier_evictions_total", "Rows evicted from the tier, clean or dirty.", top,
              d(t.evictions));
  out.counter("strata_tier_admission_rejections_total",
              "Lookups of keys the admission filter has not admitted, plus pushes dropped for "
              "them.",
              top, d(t.admission_rejections));
  out.counter("strata_tier_ttl_expirations_total", "Rows dropped because their TTL expired.", top,
              d(t.ttl_expirations));
  out.gauge("strata_tier_rows", "Rows resident in the tier.", top, d(t.rows));
  out.gauge("strata_tier_bytes", "Bytes allocated for the tier's resident rows.", top, d(t.bytes));
  out.gauge("strata_tier_capacity_rows", "Rows the tier can hold.", top, d(t.capacity_rows));
  out.gauge("strata_tier_capacity_bytes", "The tier's memory budget in bytes.", top,
            d(t.capacity_bytes));
  if (shard) {
    out.gauge("strata_tier_rows", "Rows resident in the tier.",
              with(owner, {{"tier", "write_behind"}}), d(t.write_behind_rows));
    out.gauge("strata_tier_rows", "Rows resident in the tier.", with(owner, {{"tier", "lmdb"}}),
              d(t.lmdb_rows));
  }
}

void add_shard(family_set& out, const labels& owner, const actors::tier_stats& t) {
  out.counter("strata_shard_initialized_rows_total",
              "Rows created by the initializer (keys no tier held).", owner, d(t.initialized));
  out.counter("strata_shard_prefetch_requests_total",
              "Prefetch requests received (shard prefetches and cache tiers' prefetch fills).",
              owner, d(t.prefetch_requests));
  out.counter("strata_shard_prefetch_rows_total", "Keys named by prefetch requests.", owner,
              d(t.prefetch_rows));
  out.counter("strata_shard_lookups_total",
              "Pull requests served (cache fills for lookups and prefetches, serving lookups).",
              owner, d(t.pulls));
  out.counter("strata_shard_lmdb_waits_total",
              "Lookup pulls (not prefetch fills) whose reply waited on an LMDB read (no tier "
              "above held a key).",
              owner, d(t.lmdb_waits));
  out.counter("strata_shard_lookup_rows_total",
              "Key positions in lookup pulls (cache fills for lookups, serving lookups; not "
              "prefetch fills).",
              owner, d(t.lookup_rows));
  out.counter("strata_shard_lookup_ssd_wait_rows_total",
              "Key positions of pulls read from LMDB while the pull waited (no tier above held "
              "the row).",
              owner, d(t.lookup_ssd_wait_rows));
  out.counter("strata_shard_prefetch_ssd_rows_total",
              "Rows prefetches (shard prefetches, cache tiers' prefetch fills) read from LMDB "
              "ahead of use.",
              owner, d(t.prefetch_ssd_rows));
  out.counter("strata_shard_write_back_rows_total",
              "Whole rows received from cache tiers (pass end, eviction).", owner,
              d(t.write_back_rows));
  out.counter("strata_shard_flush_batches_total",
              "Write-behind batches committed to LMDB (one write transaction each).", owner,
              d(t.flush_batches));
  out.counter("strata_shard_flush_rows_total", "Rows written to LMDB.", owner, d(t.flushed_rows));
  out.counter("strata_shard_flush_bytes_total", "Encoded bytes written to LMDB.", owner,
              d(t.flush_bytes));
  out.gauge("strata_shard_flushes_in_flight", "Flush batches sent to LMDB, not yet committed.",
            owner, d(t.flushes_in_flight));
  out.gauge("strata_shard_write_behind_rows",
            "Write-behind buffer depth: evicted dirty rows held until LMDB commits them.", owner,
            d(t.write_behind_rows));
  out.gauge("strata_shard_write_behind_peak_rows",
            "The most rows the write-behind buffer held at once since the shard started.", owner,
            d(t.write_behind_peak_rows));
  out.counter("strata_shard_write_behind_stalls_total",
              "Times the write-behind reached its bound (shards.max_queued_flush_batches) and "
              "the shard held requests until a flush landed.",
              owner, d(t.write_behind_stalls));
  out.counter("strata_shard_write_behind_stall_seconds_total",
              "Seconds the shard held requests because the write-behind was at its bound.", owner,
              t.write_behind_stall_seconds);
  out.counter("strata_shard_pushes_total", "Push requests applied.", owner, d(t.pushes));
  out.counter("strata_shard_push_rows_total", "Key positions pushed.", owner, d(t.push_rows));
  out.counter("strata_shard_duplicate_pushes_total",
              "Pushes whose push id was applied before: answered, not applied again.", owner,
              d(t.duplicate_pushes));
  out.counter("strata_shard_push_id_evictions_total",
              "Push ids forgotten from the shard's bounded dedup window.", owner,
              d(t.push_id_evictions));
}

void add_cache(family_set& out, const labels& owner, const actors::tier_stats& t) {
  out.counter("strata_cache_prefetch_requests_total", "Prefetch requests received.", owner,
              d(t.prefetch_requests));
  out.counter("strata_cache_prefetch_rows_total", "Keys named by prefetch requests.", owner,
              d(t.prefetch_rows));
  out.counter("strata_cache_write_back_rows_total", "Dirty rows written back to their shards.",
              owner, d(t.flushed_rows));
  out.counter("strata_cache_pushes_total", "Push requests handled.", owner, d(t.pushes));
  out.counter("strata_cache_push_rows_total", "Key positions pushed.", owner, d(t.push_rows));
}

}  // namespace

std::vector<MetricFamily> to_families(const node_snapshot& s) {
  family_set out;
  const labels node = with({}, {{"node", s.node}});
  out.gauge("strata_build_info",
            "Build of the running binary: version, git revision, CUDA on/off (value always 1).",
            with(node, {{"version", s.build.version},
                        {"revision", s.build.revision},
                        {"cuda", s.build.cuda ? "on" : "off"}}),
            1);

  if (s.trains) {
    const auto& t = s.training;
    out.counter("strata_training_examples_total", "Training examples processed.", node,
                d(t.examples));
    out.counter("strata_training_batches_total", "Training mini-batches processed.", node,
                d(t.batches));
    out.gauge("strata_training_loss", "Mean logloss of the most recent training batches.", node,
              t.loss);
    out.gauge("strata_training_examples_per_second", "Training throughput since training started.",
              node, t.examples_per_s);
    out.gauge("strata_training_active", "1 while training runs, 0 before and after.", node,
              t.active ? 1 : 0);
    if (t.heldout_auc)
      out.gauge("strata_training_heldout_auc", "AUC of the last held-out evaluation.", node,
                *t.heldout_auc);
    const auto& ck = s.checkpoints;
    out.counter("strata_checkpoint_completed_total", "Complete checkpoints written by this node.",
                node, d(ck.completed));
    out.counter("strata_checkpoint_failures_total",
                "Checkpoint attempts that failed (a failed checkpoint fails the run).", node,
                d(ck.failures));
    out.counter("strata_checkpoint_written_bytes_total",
                "Bytes of the files of every complete checkpoint.", node, d(ck.bytes_total));
    if (ck.last_unix_seconds > 0) {
      out.gauge("strata_checkpoint_last_success_timestamp_seconds",
                "Unix time the last checkpoint became complete.", node, ck.last_unix_seconds);
      out.gauge("strata_checkpoint_last_duration_seconds",
                "Seconds from the last checkpoint's cut to its file list (complete).", node,
                ck.last_duration_seconds);
      out.gauge("strata_checkpoint_last_bytes", "Bytes of the last checkpoint's files.", node,
                d(ck.last_bytes));
    }
  }

  if (s.transport) {
    const auto& tr = *s.transport;
    out.counter("strata_transport_rejected_frames_total",
                "Frames rejected (malformed, truncated, oversized, bad checksum), all peers.", node,
                d(tr.rejected_frames));
    out.counter("strata_transport_peer_down_total", "Peers that went down (up -> down).", node,
                d(tr.peers_down));
    out.counter("strata_transport_unauthenticated_frames_total",
                "Frames dropped because their endpoint had not authenticated as a cluster member.",
                node, d(tr.unauthenticated_frames));
    out.counter("strata_transport_refused_handshakes_total",
                "Hello exchanges refused (no or wrong cluster-secret proof, not a member).", node,
                d(tr.refused_handshakes));
    for (const auto& p : tr.peers) {
      const labels peer = with(node, {{"peer", p.name}});
      out.gauge("strata_transport_peer_up", "1 while the peer node is connected and heard from.",
                peer, p.up ? 1 : 0);
      out.counter("strata_transport_sent_bytes_total", "Frame bytes sent to the peer.", peer,
                  d(p.bytes_sent));
      out.counter("strata_transport_sent_messages_total", "Frames sent to the peer.", peer,
                  d(p.frames_sent));
      out.counter("strata_transport_received_bytes_total", "Frame bytes received from the peer.",
                  peer, d(p.bytes_received));
      out.counter("strata_transport_received_messages_total", "Frames received from the peer.",
                  peer, d(p.frames_received));
      out.gauge("strata_transport_outstanding_bytes",
                "Bytes sent to the peer and not yet released (back-pressure window).", peer,
                d(p.outstanding_bytes));
      // Flow control (credits; docs/transport.md, Back-pressure).
      out.counter("strata_transport_credit_waits_total",
                  "Frames to the peer that waited here for its credit.", peer, d(p.credit_waits));
      out.gauge("strata_transport_held_for_credit_frames",
                "Frames to the peer waiting here for its credit now.", peer, d(p.held_for_credit));
      out.gauge("strata_transport_window_peak_frames",
                "Most frames from the peer held at once above the last credit.", peer,
                d(p.window_peak_frames));
      out.counter("strata_transport_window_violations_total",
                  "Frames from the peer beyond its credit window (the peer was cut off).", peer,
                  d(p.window_violations));
    }
  }

  for (const auto& tier : s.tiers) {
    const bool shard = tier.kind == "shard";
    const labels owner =
        with(node, {{"table", s.table}, {shard ? "shard" : "cache", std::to_string(tier.index)}});
    add_tier(out, owner, tier);
    if (shard)
      add_shard(out, owner, tier);
    else
      add_cache(out, owner, tier);
    out.gauge("strata_actor_mailbox_depth_messages", "Messages waiting in the actor's mailbox.",
              with(owner, {{"actor", tier.kind}}), d(tier.mailbox_depth));
    for (const auto& lat : tier.latencies)
      out.histogram("strata_" + metric_word(lat.name) + "_latency_seconds", latency_help(lat.name),
                    owner, lat);
  }
  for (const auto& a : s.actors) {
    labels who = with(node, {{"actor", a.kind}});
    if (a.kind == "worker") who = with(who, {{"worker", std::to_string(a.index)}});
    out.gauge("strata_actor_mailbox_depth_messages", "Messages waiting in the actor's mailbox.",
              who, d(a.mailbox_depth));
  }
  out.counter("strata_monitoring_stats_failures_total",
              "Stats requests to shards and caches that failed or timed out at scrape time.", node,
              d(s.stats_failures));
  return out.take();
}

actors::tier_stats monotonic_merge(const actors::tier_stats& earlier,
                                   const actors::tier_stats& later) {
  actors::tier_stats m = later;
  auto keep = [](uint64_t& field, uint64_t before) { field = std::max(field, before); };
  keep(m.lookups, earlier.lookups);
  keep(m.hits, earlier.hits);
  keep(m.misses, earlier.misses);
  keep(m.inserts, earlier.inserts);
  keep(m.evictions, earlier.evictions);
  keep(m.flushed_rows, earlier.flushed_rows);
  keep(m.flush_batches, earlier.flush_batches);
  keep(m.flush_bytes, earlier.flush_bytes);
  keep(m.write_back_rows, earlier.write_back_rows);
  keep(m.prefetch_requests, earlier.prefetch_requests);
  keep(m.prefetch_rows, earlier.prefetch_rows);
  keep(m.admission_rejections, earlier.admission_rejections);
  keep(m.ttl_expirations, earlier.ttl_expirations);
  keep(m.pushes, earlier.pushes);
  keep(m.push_rows, earlier.push_rows);
  keep(m.duplicate_pushes, earlier.duplicate_pushes);
  keep(m.push_id_evictions, earlier.push_id_evictions);
  keep(m.pulls, earlier.pulls);
  keep(m.lmdb_waits, earlier.lmdb_waits);
  keep(m.lookup_rows, earlier.lookup_rows);
  keep(m.lookup_ssd_wait_rows, earlier.lookup_ssd_wait_rows);
  keep(m.prefetch_ssd_rows, earlier.prefetch_ssd_rows);
  keep(m.initialized, earlier.initialized);
  if (m.chain_hits.size() < earlier.chain_hits.size())
    m.chain_hits.resize(earlier.chain_hits.size());
  for (size_t i = 0; i < earlier.chain_hits.size(); ++i)
    keep(m.chain_hits[i], earlier.chain_hits[i]);
  for (const auto& before : earlier.latencies) {
    auto it = std::find_if(m.latencies.begin(), m.latencies.end(),
                           [&](const auto& l) { return l.name == before.name; });
    if (it == m.latencies.end()) {
      m.latencies.push_back(before);
      continue;
    }
    if (it->counts.size() != before.counts.size()) continue;
    for (size_t i = 0; i < before.counts.size(); ++i) keep(it->counts[i], before.counts[i]);
    it->sum_seconds = std::max(it->sum_seconds, before.sum_seconds);
  }
  return m;
}

}  // namespace strata::monitoring
