// The launcher's output never blocks: a reader that stops reading costs
// lines (counted, and said so once it reads again), a reader that goes away
// ends the forwarding, and neither stops the writer's caller.
#include "comm/job/output_sink.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string ReadAll(int fd) {
  fcntl(fd, F_SETFL, O_NONBLOCK);
  std::string got;
  char buf[65536];
  ssize_t k;
  while ((k = read(fd, buf, sizeof(buf))) > 0) got.append(buf, k);
  return got;
}

TEST(OutputSinkTest, AReaderThatStopsReadingCostsLinesNeverTime) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  {
    OutputSink sink(pipe_fds[1], 64 << 10);
    const std::string line(99, 'x');
    const auto start = Clock::now();
    for (int i = 0; i < 20000; ++i) sink.Append(line + "\n");  // 2 MB
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
    EXPECT_GT(sink.dropped_lines(), 10000);
    EXPECT_FALSE(sink.Flush(milliseconds(100)));  // nobody reads
    // The reader comes back: what was kept arrives, then the count (in one
    // report or more: the writer may have taken a piece between drops).
    std::string got;
    int64_t reported = 0;
    const std::string tag = "[launcher] ";
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (reported < sink.dropped_lines() && Clock::now() < deadline) {
      got += ReadAll(pipe_fds[0]);
      reported = 0;
      for (size_t at = got.find(tag); at != std::string::npos;
           at = got.find(tag, at + 1)) {
        reported += std::atoll(got.c_str() + at + tag.size());
      }
      std::this_thread::sleep_for(milliseconds(5));
    }
    EXPECT_EQ(reported, sink.dropped_lines())
        << got.substr(got.size() > 200 ? got.size() - 200 : 0);
    EXPECT_NE(got.find(" line(s) of the ranks' output dropped"),
              std::string::npos);
    EXPECT_TRUE(sink.Flush(milliseconds(5000)));
  }
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

TEST(OutputSinkTest, AReaderThatWentAwayEndsTheForwardingNotTheProcess) {
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &old);  // as the launcher does
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  close(pipe_fds[0]);
  OutputSink sink(pipe_fds[1]);
  sink.Append("nobody hears this\n");
  EXPECT_TRUE(sink.Flush(milliseconds(5000)));
  EXPECT_TRUE(sink.closed());
  sink.Append("nor this\n");  // discarded at once
  EXPECT_TRUE(sink.Flush(milliseconds(100)));
  close(pipe_fds[1]);
  sigaction(SIGPIPE, &old, nullptr);
}

TEST(OutputSinkTest, WhatIsReadArrivesWholeAndInOrder) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  std::string want;
  {
    OutputSink sink(pipe_fds[1]);
    for (int i = 0; i < 1000; ++i) {
      const std::string line = "line " + std::to_string(i) + "\n";
      sink.Append(line);
      want += line;
    }
    std::string got;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (got.size() < want.size() && Clock::now() < deadline) {
      got += ReadAll(pipe_fds[0]);
    }
    EXPECT_EQ(got, want);
    EXPECT_TRUE(sink.Flush(milliseconds(1000)));
    EXPECT_EQ(sink.dropped_lines(), 0);
  }
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

}  // namespace
}  // namespace ringlab::comm
