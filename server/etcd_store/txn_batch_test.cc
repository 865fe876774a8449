// TxnBatch on its own (no etcd): what lands in which Txn, at limits small
// enough to cut a few mutations: distinct keys split at the operation and the
// byte limit, a key written again in the same part landing once with its last
// value (a value that grows past the limit cuts the part, one that shrinks
// does not), a mutation too large for one Txn sending its deletes first, and
// one whose puts alone do not fit refused.
#include "server/etcd_store/txn_batch.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/etcd/client.h"
#include "server/etcd_store/etcd_store.h"

namespace monta::etcd_store {
namespace {

using store::Mutation;

Mutation Node(const std::string& name) {
  Mutation m;
  m.kind = Mutation::Kind::kNode;
  m.node.set_name(name);
  return m;
}

// What one mutation's log adds to a Txn (as TxnBatch counts it).
int64_t LogBytes(const Mutation& m) {
  return static_cast<int64_t>(EncodeMutations({m}).size()) - 8;
}

// A put's or a delete's bytes in a Txn.
int64_t OpBytes(const std::string& key, const std::string& value) {
  return static_cast<int64_t>(key.size() + value.size()) +
         etcd::kOpOverheadBytes;
}

// "put k=v" / "delete k" per operation, then "log a b" naming its
// mutations (none: a part of deletes only, without a log).
std::vector<std::string> Shown(const TxnBatch::Part& part) {
  std::vector<std::string> out;
  for (const etcd::Op& op : part.ops) {
    out.push_back(op.kind == etcd::Op::Kind::kPut
                      ? absl::StrCat("put ", op.key, "=", op.value)
                      : absl::StrCat("delete ", op.key));
  }
  if (part.mutations.empty()) return out;
  std::string log = "log";
  for (const Mutation& m : part.mutations) {
    absl::StrAppend(&log, " ", m.node.name());
  }
  out.push_back(log);
  return out;
}

using Parts = std::vector<std::vector<std::string>>;

Parts ShownAll(const std::vector<TxnBatch::Part>& parts) {
  Parts out;
  for (const TxnBatch::Part& part : parts) out.push_back(Shown(part));
  return out;
}

// Mutation `name` putting `writes` (key, value) and deleting `deletes`.
void Add(TxnBatch& batch, const std::string& name,
         const std::vector<std::pair<std::string, std::string>>& writes,
         const std::vector<std::string>& deletes = {}, size_t index = 0) {
  for (const auto& [key, value] : writes) batch.Put(key, value);
  for (const std::string& key : deletes) batch.Delete(key);
  ASSERT_TRUE(batch.EndMutation(Node(name), index).ok()) << name;
}

TEST(TxnBatchTest, DistinctKeysSplitAtTheOperationLimit) {
  // 4 operations per Txn: 3 writes and the log.
  TxnBatch batch(4, 1 << 20);
  Add(batch, "a", {{"k1", "1"}, {"k2", "2"}});
  Add(batch, "b", {{"k3", "3"}});
  Add(batch, "c", {{"k4", "4"}});
  Add(batch, "d", {{"k5", "5"}}, {"k6"});
  EXPECT_EQ(ShownAll(batch.Finish()),
            (Parts{{"put k1=1", "put k2=2", "put k3=3", "log a b"},
                   {"put k4=4", "put k5=5", "delete k6", "log c d"}}));
}

TEST(TxnBatchTest, AKeyWrittenAgainLandsOnceWithItsLastValue) {
  TxnBatch batch(4, 1 << 20);
  Add(batch, "a", {{"k1", "old"}, {"k2", "2"}});
  Add(batch, "b", {{"k1", "new"}});  // no new operation: it fits
  Add(batch, "c", {}, {"k2"});       // a put turned delete
  Add(batch, "d", {{"k3", "3"}});
  Add(batch, "e", {{"k4", "4"}});  // a 4th write: the next Txn
  EXPECT_EQ(ShownAll(batch.Finish()),
            (Parts{{"put k1=new", "delete k2", "put k3=3", "log a b c d"},
                   {"put k4=4", "log e"}}));
}

TEST(TxnBatchTest, DistinctKeysSplitAtTheByteLimit) {
  const std::string v(100, 'v');
  // Room for exactly two mutations of one 100-byte put each.
  const int64_t two =
      2 * (OpBytes("k1", v) + LogBytes(Node("a"))) + etcd::kOpOverheadBytes;
  TxnBatch batch(128, two);
  Add(batch, "a", {{"k1", v}});
  Add(batch, "b", {{"k2", v}});
  Add(batch, "c", {{"k3", v}});
  const Parts parts = ShownAll(batch.Finish());
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].back(), "log a b");
  EXPECT_EQ(parts[1].back(), "log c");
}

// The bytes of a key written again count once, at its last size: a value
// that shrinks and grows back fits where the sum of every write would not; one
// that grows past the limit cuts the part.
TEST(TxnBatchTest, AValueWrittenAgainCountsAtItsLastSize) {
  const std::string small(10, 's');
  const std::string large(300, 'l');
  const int64_t log = LogBytes(Node("a"));  // every name here is one letter
  // Three mutations' logs with k1 large and k2 small, exactly.
  const int64_t limit = OpBytes("k1", large) + OpBytes("k2", small) + 3 * log +
                        etcd::kOpOverheadBytes;
  {
    TxnBatch batch(128, limit);
    Add(batch, "a", {{"k1", large}, {"k2", small}});
    Add(batch, "b", {{"k1", small}});
    Add(batch, "c", {{"k1", large}});
    EXPECT_EQ(ShownAll(batch.Finish()),
              (Parts{{absl::StrCat("put k1=", large),
                      absl::StrCat("put k2=", small), "log a b c"}}));
  }
  {
    TxnBatch batch(128, limit);
    Add(batch, "a", {{"k1", small}, {"k2", small}});
    Add(batch, "b", {{"k1", large}});
    // k2 grows too: past the limit by its growth, so c starts the next Txn.
    Add(batch, "c", {{"k2", large}});
    EXPECT_EQ(ShownAll(batch.Finish()),
              (Parts{{absl::StrCat("put k1=", large),
                      absl::StrCat("put k2=", small), "log a b"},
                     {absl::StrCat("put k2=", large), "log c"}}));
  }
}

TEST(TxnBatchTest, AMutationTooLargeForOneTxnSendsItsDeletesFirst) {
  TxnBatch batch(4, 1 << 20);
  Add(batch, "a", {{"k0", "0"}});
  // 5 deletes and 2 puts: more than one Txn. a's part is cut, the deletes go
  // in Txns of their own (4 and 1, no log), then b's puts with its log, which
  // c joins.
  Add(batch, "b", {{"p1", "1"}, {"p2", "2"}}, {"d1", "d2", "d3", "d4", "d5"});
  Add(batch, "c", {{"k9", "9"}});
  EXPECT_EQ(ShownAll(batch.Finish()),
            (Parts{{"put k0=0", "log a"},
                   {"delete d1", "delete d2", "delete d3", "delete d4"},
                   {"delete d5"},
                   {"put k9=9", "put p1=1", "put p2=2", "log b c"}}));
}

TEST(TxnBatchTest, AMutationWhosePutsDoNotFitIsRefused) {
  TxnBatch batch(3, 1 << 20);
  for (int i = 0; i < 3; ++i) batch.Put(absl::StrCat("k", i), "v");
  const absl::Status s = batch.EndMutation(Node("a"), 7);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("mutations[7]"), std::string::npos) << s;
}

}  // namespace
}  // namespace monta::etcd_store
