// A shared mutex whose waiting writers go before new readers. The
// std::shared_mutex of libstdc++ is glibc's default rwlock, which lets new
// readers in while a writer waits: readers whose holds overlap (serving
// lookups reading LMDB under a table's lock held shared) can keep a writer
// (an online update) out for as long as they keep coming. This one is
// glibc's rwlock of kind PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP.
// Not recursive for readers: a thread that holds it shared must not lock
// it shared again (with a writer waiting, that would deadlock).
// Meets SharedMutex: std::unique_lock and std::shared_lock take it.
#pragma once

#include <pthread.h>

#include <system_error>

namespace strata {

class writer_first_mutex {
 public:
  writer_first_mutex() {
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    const int rc = pthread_rwlock_init(&lock_, &attr);
    pthread_rwlockattr_destroy(&attr);
    if (rc != 0) throw std::system_error(rc, std::generic_category(), "pthread_rwlock_init");
  }
  ~writer_first_mutex() { pthread_rwlock_destroy(&lock_); }
  writer_first_mutex(const writer_first_mutex&) = delete;
  writer_first_mutex& operator=(const writer_first_mutex&) = delete;

  void lock() { check(pthread_rwlock_wrlock(&lock_), "pthread_rwlock_wrlock"); }
  bool try_lock() { return pthread_rwlock_trywrlock(&lock_) == 0; }
  void unlock() { pthread_rwlock_unlock(&lock_); }
  void lock_shared() { check(pthread_rwlock_rdlock(&lock_), "pthread_rwlock_rdlock"); }
  bool try_lock_shared() { return pthread_rwlock_tryrdlock(&lock_) == 0; }
  void unlock_shared() { pthread_rwlock_unlock(&lock_); }

 private:
  static void check(int rc, const char* what) {
    if (rc != 0) throw std::system_error(rc, std::generic_category(), what);
  }
  pthread_rwlock_t lock_;
};

}  // namespace strata
