#include "server/store/record_done.h"

#include "absl/synchronization/notification.h"

namespace monta::store {

struct RecordWait::State {
  absl::Notification told;
  absl::Status stored;  // written once, before `told`
};

RecordWait::RecordWait() : state_(std::make_shared<State>()) {}

RecordDone RecordWait::done() const {
  // Shared: the log may still hold the callback when the waiter is gone.
  return [state = state_](const absl::Status& stored) {
    state->stored = stored;
    state->told.Notify();
  };
}

absl::Status RecordWait::Wait() const {
  state_->told.WaitForNotification();
  return state_->stored;
}

}  // namespace monta::store
