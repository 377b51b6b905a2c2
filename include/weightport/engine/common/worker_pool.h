// WorkerPool: a few threads that run submitted tasks in order of submission (CPU work taken off a
// progress loop, such as verifying the hash of a chunk that just landed).
//
// Thread-safety: Submit from any thread. The destructor runs every task already submitted, then
// joins the threads; it must not run on one of the pool's own threads (a task must not hold the
// last reference to the pool's owner).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "weightport/core/thread_annotations.h"

namespace weightport {

class WorkerPool {
 public:
  explicit WorkerPool(size_t threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Submit(std::function<void()> task);
  size_t size() const { return threads_.size(); }

 private:
  void Run();

  Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace weightport
