// std::mutex with Clang thread-safety annotations, for code that must stay
// visible to ThreadSanitizer: Debian's Abseil is not built with TSAN, so it
// cannot see absl::Mutex's synchronization, and libstdc++'s std::mutex carries
// no annotations, so `-Wthread-safety` cannot check it. This wrapper is both.
#ifndef MONTA_COMMON_STD_MUTEX_H_
#define MONTA_COMMON_STD_MUTEX_H_

#include <condition_variable>
#include <mutex>
#include <utility>

#include "absl/base/thread_annotations.h"

namespace monta {

class ABSL_LOCKABLE StdMutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  friend class StdMutexLock;
  std::mutex mu_;
};

// Holds `mu` for its scope, like absl::MutexLock.
class ABSL_SCOPED_LOCKABLE StdMutexLock {
 public:
  explicit StdMutexLock(StdMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu)
      : lock_(mu->mu_) {}
  ~StdMutexLock() ABSL_UNLOCK_FUNCTION() {}
  StdMutexLock(const StdMutexLock&) = delete;
  StdMutexLock& operator=(const StdMutexLock&) = delete;

  // Waits on `cv` until `ready()` is true; the mutex is held again on return
  // and while `ready` runs (annotate it ABSL_EXCLUSIVE_LOCKS_REQUIRED).
  template <typename Predicate>
  void Wait(std::condition_variable& cv, Predicate ready) {
    cv.wait(lock_, std::move(ready));
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace monta

#endif  // MONTA_COMMON_STD_MUTEX_H_
