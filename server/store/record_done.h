// How a decision, verification or audit log tells its caller whether a record
// is stored (issue 20: a decision is answered only once its record is): a
// callback told once, so a gRPC callback reactor can finish from it without a
// thread waiting, and RecordWait for a thread that may block.
#ifndef MONTA_SERVER_STORE_RECORD_DONE_H_
#define MONTA_SERVER_STORE_RECORD_DONE_H_

#include <functional>
#include <memory>

#include "absl/status/status.h"

namespace monta::store {

// Told once: OK when the record is stored as durably as its log stores
// anything, else why not (UNAVAILABLE: not stored in time, or the writer's
// queue is full; the caller must not answer as if it were). It may run on the
// log's own thread, or on the caller's before the Record* call returns; it
// must not block.
using RecordDone = std::function<void(const absl::Status& stored)>;

// A RecordDone a thread waits for (the admission webhook's workers, a verify
// run's thread; never a gRPC callback thread). The log bounds the wait: it
// tells every record by its deadline.
class RecordWait {
 public:
  RecordWait();
  // The callback to hand to the log (once).
  RecordDone done() const;
  // Blocks until it was told; returns what it was told.
  absl::Status Wait() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace monta::store

#endif  // MONTA_SERVER_STORE_RECORD_DONE_H_
