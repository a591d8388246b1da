// The process-wide worker pool behind parallel_for (core/parallel.h).
//
// One job at a time lives in the pool's slot.  Items are claimed through one 64-bit word,
// (job number << 40) | next item, by compare-and-swap, and the caller closes the word when
// the job ends: a worker that wakes late, after its job has ended, finds a closed word or
// another job number there and claims nothing, so the caller never waits for a worker that
// is not running one of its items.  The caller publishes the job,
// wakes the workers, takes items itself and returns when the last item is finished (its
// finisher wakes the caller if the caller has stopped spinning).
//
// Idle workers spin for kSpin, then sleep on a condition variable.  1 ms: a call that follows
// within it finds them awake (with 50 or 200 us, batches of 4 requests called back to back got
// no speed-up: bench/results/cpu_pool.md); libgomp's default wait spins several times longer
// after every parallel region, holding cores torch's threads and the engine's could use.  After fork() the child starts a new pool (the parent's workers
// do not exist there).
#include "core/parallel.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

namespace specops {
namespace {

constexpr auto kSpin = std::chrono::microseconds(1000);  // (see above)
constexpr int kMaxThreads = 256;
constexpr int kItemBits = 40;  // items per job < 2^40; the job number takes the other 24 bits
constexpr uint64_t kItemMask = (uint64_t(1) << kItemBits) - 1;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins on `done` for about `d`; true if it held by then.
template <class Done>
bool spin_for(std::chrono::microseconds d, Done&& done) {
  const auto until = std::chrono::steady_clock::now() + d;
  for (int k = 1;; ++k) {
    if (done()) return true;
    cpu_relax();
    if ((k & 255) == 0 && std::chrono::steady_clock::now() > until) return done();
  }
}

class Pool {
 public:
  // false: the pool is busy (a job of another thread, or of this one: a nested call)
  bool try_run(int64_t n, int threads, void (*body)(void*, int64_t), void* ctx) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    grow(threads - 1);
    body_ = body;
    ctx_ = ctx;
    error_ = nullptr;
    n_.store(n, std::memory_order_release);  // after the last job's closing store (see work)
    threads_.store(threads, std::memory_order_relaxed);
    left_.store(n, std::memory_order_relaxed);
    job_ = (job_ + 1) & ((uint64_t(1) << (64 - kItemBits)) - 1);
    const uint64_t first = job_ << kItemBits;
    {
      std::lock_guard<std::mutex> lk(m_);
      word_.store(first, std::memory_order_release);  // publishes the fields above
      gen_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    work(first, 0);
    if (!spin_for(kSpin, [&] { return left_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> lk(done_m_);
      done_cv_.wait(lk, [&] { return left_.load(std::memory_order_acquire) == 0; });
    }
    // Closed: a worker still holding this job's last word (which it compares with the next
    // job's n) can no longer claim through it.
    word_.store(first | kItemMask, std::memory_order_relaxed);
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  // Claims and runs items of the job whose first word is `first` (id: 0 the caller, else a
  // worker), until none is left or another job holds the word.
  void work(uint64_t first, int id) {
    for (uint64_t w = word_.load(std::memory_order_acquire);;) {
      // (n_ may already be the next job's: then this job was closed first, and the
      // compare-and-swap below fails on the closed word)
      if ((w & ~kItemMask) != first || id >= threads_.load(std::memory_order_relaxed) ||
          int64_t(w & kItemMask) >= n_.load(std::memory_order_acquire))
        return;
      if (!word_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel)) continue;
      try {  // (the job cannot end before this item: its fields are stable here)
        body_(ctx_, int64_t(w & kItemMask));
      } catch (...) {
        std::lock_guard<std::mutex> lk(done_m_);
        if (!error_) error_ = std::current_exception();
      }
      if (left_.fetch_sub(1, std::memory_order_acq_rel) == 1) {  // the job's last item
        std::lock_guard<std::mutex> lk(done_m_);
        done_cv_.notify_one();
      }
      w = word_.load(std::memory_order_acquire);
    }
  }

  void grow(int workers) {  // (under busy_)
    for (; started_ < workers; ++started_)
      std::thread(&Pool::worker, this, started_ + 1, gen_.load(std::memory_order_relaxed))
          .detach();
  }

  void worker(int id, uint64_t seen) {
    for (;;) {
      if (!spin_for(kSpin, [&] { return gen_.load(std::memory_order_acquire) != seen; })) {
        std::unique_lock<std::mutex> lk(m_);
        wake_.wait(lk, [&] { return gen_.load(std::memory_order_relaxed) != seen; });
      }
      seen = gen_.load(std::memory_order_relaxed);
      work(word_.load(std::memory_order_acquire) & ~kItemMask, id);
    }
  }

  std::mutex busy_;  // one job at a time
  // the job (written by its caller under busy_ before word_ is published)
  void (*body_)(void*, int64_t) = nullptr;
  void* ctx_ = nullptr;
  std::exception_ptr error_;  // the first exception of an item (under done_m_)
  std::atomic<int64_t> n_{0};
  std::atomic<int> threads_{0};  // the caller and workers 1 .. threads - 1 take items
  std::atomic<int64_t> left_{0};  // items not finished
  std::atomic<uint64_t> word_{0};  // (job number << kItemBits) | next item
  uint64_t job_ = 0;
  // waking the workers (gen_: one more per job, bumped under m_) and the caller
  std::mutex m_;
  std::condition_variable wake_;
  std::atomic<uint64_t> gen_{0};
  std::mutex done_m_;
  std::condition_variable done_cv_;
  int started_ = 0;  // workers started (under busy_)
};

// The pool, created at first use; never destroyed (detached workers may outlive static
// destruction at exit).  A forked child sees none and creates its own.
std::atomic<Pool*> g_pool{nullptr};

Pool& pool() {
  static const int at_fork = pthread_atfork(nullptr, nullptr, [] { g_pool.store(nullptr); });
  (void)at_fork;
  Pool* p = g_pool.load(std::memory_order_acquire);
  if (!p) {
    Pool* fresh = new Pool;  // no thread yet: workers start at the first job
    if (g_pool.compare_exchange_strong(p, fresh, std::memory_order_acq_rel))
      p = fresh;
    else
      delete fresh;
  }
  return *p;
}

}  // namespace

void parallel_run(int64_t n, int threads, void (*body)(void*, int64_t), void* ctx) {
  const int t = int(std::min<int64_t>({n, int64_t(threads), int64_t(kMaxThreads)}));
  if (t > 1 && n <= int64_t(kItemMask) && pool().try_run(n, t, body, ctx)) return;
  for (int64_t i = 0; i < n; ++i) body(ctx, i);
}

}  // namespace specops
