#include "common/backoff.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace monta {

Backoff::Backoff(absl::Duration initial, absl::Duration max, Uniform uniform)
    : initial_(initial), max_(max), uniform_(std::move(uniform)) {
  if (!uniform_) {
    std::random_device device;
    rng_.seed((static_cast<uint64_t>(device()) << 32) | device());
  }
}

absl::Duration Backoff::Delay(int attempt, absl::Duration cap) {
  absl::MutexLock lock(&mu_);
  return DelayLocked(attempt, cap);
}

absl::Duration Backoff::DelayLocked(int attempt, absl::Duration cap) {
  // 2^30 times any initial wait worth having is past any cap.
  const int doublings = std::clamp(attempt, 0, 30);
  const absl::Duration full = std::max(
      absl::ZeroDuration(),
      std::min({max_, cap,
                initial_ * static_cast<int64_t>(int64_t{1} << doublings)}));
  double draw;
  if (uniform_) {
    draw = std::clamp(uniform_(), 0.0, 1.0);
  } else {
    draw = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  }
  return full / 2 + (full / 2) * draw;
}

absl::Duration Backoff::Next() {
  absl::MutexLock lock(&mu_);
  const absl::Duration delay = DelayLocked(attempts_, absl::InfiniteDuration());
  if (attempts_ < std::numeric_limits<int>::max()) ++attempts_;
  return delay;
}

void Backoff::Reset() {
  absl::MutexLock lock(&mu_);
  attempts_ = 0;
}

int Backoff::attempts() const {
  absl::MutexLock lock(&mu_);
  return attempts_;
}

}  // namespace monta
