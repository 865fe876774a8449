// A Store that hands every call to another one (tests): subclasses change the
// calls they need (an etcd store with its own client, a List held still).
#ifndef MONTA_SERVER_STORE_FORWARDING_STORE_H_
#define MONTA_SERVER_STORE_FORWARDING_STORE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "server/store/store.h"

namespace monta::store {

class ForwardingStore : public Store {
 public:
  // `store` is not owned and must outlive this (a subclass may own it).
  explicit ForwardingStore(Store* store) : store_(store) {}

  absl::StatusOr<Fence> Lead() override { return store_->Lead(); }
  absl::StatusOr<Snapshot> List(int64_t revision = 0) override {
    return store_->List(revision);
  }
  absl::StatusOr<Committed> Commit(
      const Fence& fence, const std::vector<Mutation>& mutations) override {
    return store_->Commit(fence, mutations);
  }
  absl::StatusOr<std::unique_ptr<ChangeWatch>> Watch(
      int64_t after_revision) override {
    return store_->Watch(after_revision);
  }
  absl::StatusOr<int64_t> NewestRevision() override {
    return store_->NewestRevision();
  }

 private:
  Store* const store_;
};

}  // namespace monta::store

#endif  // MONTA_SERVER_STORE_FORWARDING_STORE_H_
