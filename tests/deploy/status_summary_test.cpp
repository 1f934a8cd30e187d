// `strata status`'s summary of a /status document (deploy/status_summary.hpp):
// counts, not partition lists; every node's health; the training line and
// the last checkpoint; an error reply's message without its JSON.
#include "deploy/status_summary.hpp"

#include <gtest/gtest.h>

#include <regex>
#include <string>

namespace strata::deploy {
namespace {

const char* const document = R"({
  "cluster": "c3", "state": "training",
  "nodes": [{"name": "n0", "host": "10.0.0.1", "health": "ok"},
            {"name": "n1", "host": "10.0.0.2", "health": "down: no frame for 10000 ms"}],
  "partition_map": {"epoch": 2, "partitions": 8, "shards": 2},
  "scaling_to": null,
  "shards": [{"index": 0, "node": "n0", "partitions": [0, 2, 4, 6], "partition_count": 4,
              "rows": {"dram": 10, "write_behind": 1, "lmdb": 20}, "health": "ok"},
             {"index": 1, "node": "n1", "partitions": [1, 3, 5, 7], "partition_count": 4,
              "health": "unreachable: node 'n1' is down"}],
  "caches": [{"index": 0, "node": "n0", "rows": 5, "health": "ok"}],
  "rows": {"cache": 5, "dram": 10, "write_behind": 1, "lmdb": 20},
  "training": {"batches": 9, "examples": 2500, "recent_loss": 0.5, "passes": 0, "workers": 2,
               "checkpoints": 3, "last_checkpoint": "/ck/ckpt-000000000004",
               "examples_per_second": 1234.4, "planned_examples": 10000, "epochs": 4,
               "last_checkpoint_epoch": 4, "last_checkpoint_age_seconds": 42}
})";

TEST(StatusSummary, CountsHealthTrainingAndCheckpointInAFewLines) {
  auto s = status_summary(document);
  ASSERT_TRUE(s) << s.err().to_string();
  EXPECT_EQ(*s,
            "cluster c3: training (partition map epoch 2: 8 partitions on 2 shards)\n"
            "nodes:\n"
            "  n0  10.0.0.1  ok\n"
            "  n1  10.0.0.2  down: no frame for 10000 ms\n"
            "shards:\n"
            "  shard 0  n0  4 partitions  rows 10 DRAM, 1 write-behind, 20 LMDB  ok\n"
            "  shard 1  n1  4 partitions  rows ?                                 "
            "unreachable: node 'n1' is down\n"
            "caches: 1 tier, 5 rows, all ok\n"
            "rows: 10 DRAM, 1 write-behind, 20 LMDB, 5 cached\n"
            "training: 2500 of 10000 examples (25%), epoch 2 of 4, 1234 examples/s, loss 0.5000, "
            "2 workers\n"
            "checkpoints: 3, last epoch 4, 42 s ago: /ck/ckpt-000000000004\n");
}

TEST(StatusSummary, ADocumentWithoutTheNewFieldsStillSummarizes) {
  auto s = status_summary(R"({"cluster": "c", "state": "idle", "training": {"examples": 0,
                              "checkpoints": 0, "last_checkpoint": "", "workers": 1}})");
  ASSERT_TRUE(s);
  EXPECT_NE(s->find("cluster c: idle\n"), std::string::npos) << *s;
  EXPECT_NE(s->find("training: 0 examples, 1 worker\n"), std::string::npos) << *s;
  EXPECT_NE(s->find("checkpoints: none yet\n"), std::string::npos) << *s;
  EXPECT_FALSE(status_summary("not json"));
}

TEST(StatusSummary, AResumedRunCountsTheExamplesBeforeItsResume) {
  auto s = status_summary(R"({"cluster": "c", "state": "training", "training": {"examples": 1000,
      "restored_examples": 4000, "planned_examples": 10000, "epochs": 2, "workers": 1}})");
  ASSERT_TRUE(s);
  EXPECT_NE(s->find("training: 5000 of 10000 examples (50%; 4000 before the resume), epoch 2 of 2"),
            std::string::npos)
      << *s;
}

TEST(StatusSummary, AnErrorReplyIsItsMessage) {
  EXPECT_EQ(admin_error_text("{\n  \"error\": \"placement: unknown node \\\"n9\\\"\"\n}\n"),
            "placement: unknown node \"n9\"\n");
  EXPECT_EQ(admin_error_text("plain text\n"), "plain text\n");
}

}  // namespace
}  // namespace strata::deploy
