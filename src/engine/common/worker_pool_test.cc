#include "weightport/engine/common/worker_pool.h"

#include <atomic>

#include <gtest/gtest.h>

namespace weightport {
namespace {

TEST(WorkerPool, RunsEverySubmittedTaskBeforeItIsDestroyed) {
  std::atomic<int> ran{0};
  {
    WorkerPool pool(3);
    EXPECT_EQ(pool.size(), 3u);
    for (int i = 0; i < 1000; ++i) pool.Submit([&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 1000);
}

TEST(WorkerPool, OneThreadRunsTasksInSubmissionOrder) {
  std::vector<int> order;
  {
    WorkerPool pool(1);
    for (int i = 0; i < 100; ++i) pool.Submit([&order, i] { order.push_back(i); });
  }
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

}  // namespace
}  // namespace weightport
