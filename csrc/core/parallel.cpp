// The process-wide worker pool behind parallel_for (core/parallel.h).
//
// A job lives on its caller's stack.  The caller publishes it (under the pool's mutex, with a
// new generation number), wakes the workers and takes items itself; a worker joins the job
// under the mutex while it is the current one (counting itself in `users`) and leaves it when
// no item is left.  The caller returns once every item is finished, the job is withdrawn and
// no worker is inside it, so no worker ever touches a finished job.
//
// Idle workers spin for kSpin (calls that follow each other closely find them awake), then
// sleep on a condition variable: unlike an OpenMP runtime's default wait (milliseconds of
// spinning after every parallel region), they leave the cores to torch's threads and the
// engine's soon after a call.  After fork() the child starts a new pool (the parent's workers
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

constexpr auto kSpin = std::chrono::microseconds(50);
constexpr int kMaxThreads = 256;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

struct Job {
  void (*body)(void*, int64_t);
  void* ctx;
  int64_t n;
  int threads;                   // the caller and workers 1 .. threads - 1 take part
  std::atomic<int64_t> next{0};  // the next item to hand out
  std::atomic<int64_t> left{0};  // items not finished
  std::atomic<int> users{0};     // workers inside the job
  std::atomic<bool> failed{false};
  std::exception_ptr error;  // the first exception (written by the thread that set `failed`)

  void work() {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) {
      try {
        body(ctx, i);
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
      }
      left.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
};

class Pool {
 public:
  // false: the pool is busy (a job of another thread, or of this one: a nested call)
  bool try_run(Job& job) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    grow(job.threads - 1);
    job.left.store(job.n, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lk(m_);
      job_ = &job;
      gen_.store(gen_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    }
    wake_.notify_all();
    job.work();
    wait_until_zero(job.left);
    {
      std::lock_guard<std::mutex> lk(m_);
      job_ = nullptr;  // no worker joins it from now on
    }
    wait_until_zero(job.users);
    return true;
  }

 private:
  template <class T>
  static void wait_until_zero(const std::atomic<T>& x) {
    for (int k = 0; x.load(std::memory_order_acquire) != 0; ++k) {
      if (k < 4096)
        cpu_relax();
      else
        std::this_thread::yield();
    }
  }

  void grow(int workers) {  // (under busy_)
    for (; started_ < workers; ++started_)
      std::thread(&Pool::worker, this, started_ + 1, gen_.load(std::memory_order_relaxed))
          .detach();
  }

  void worker(int id, uint64_t seen) {
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + kSpin;
      for (int k = 0; gen_.load(std::memory_order_acquire) == seen; ++k) {
        cpu_relax();
        if ((k & 255) == 255 && std::chrono::steady_clock::now() > until) break;
      }
      Job* job;
      {
        std::unique_lock<std::mutex> lk(m_);
        wake_.wait(lk, [&] { return gen_.load(std::memory_order_relaxed) != seen; });
        seen = gen_.load(std::memory_order_relaxed);
        job = job_ && id < job_->threads ? job_ : nullptr;
        if (job) job->users.fetch_add(1, std::memory_order_relaxed);
      }
      if (job) {
        job->work();
        job->users.fetch_sub(1, std::memory_order_release);
      }
    }
  }

  std::mutex busy_;  // one job at a time
  std::mutex m_;     // job_ and the wake-ups
  std::condition_variable wake_;
  Job* job_ = nullptr;
  std::atomic<uint64_t> gen_{0};  // one more per job (written under m_)
  int started_ = 0;               // workers started (under busy_)
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
  Job job;
  job.body = body;
  job.ctx = ctx;
  job.n = n;
  job.threads = int(std::min<int64_t>({n, int64_t(threads), int64_t(kMaxThreads)}));
  if (job.threads > 1 && pool().try_run(job)) {
    if (job.failed.load()) std::rethrow_exception(job.error);
    return;
  }
  for (int64_t i = 0; i < n; ++i) body(ctx, i);
}

}  // namespace specops
