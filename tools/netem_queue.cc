// weightport-netem: delay and loss for the testbed's links on kernels built without the netem
// qdisc. scripts/testbed sends every packet a host receives to NFQUEUE queue Q (iptables INPUT;
// held outbound packets would count against their socket's TCP Small Queues budget and stall it);
// this program, running in that host's namespace, drops each packet with probability --loss and hands
// the rest back to the kernel --delay-ms after it arrived. Every packet gets the same delay, so a
// FIFO keeps them in order and one batch verdict releases everything that is due.
//
// Only verdicts travel to user space (packets are queued with their metadata, not copied), and
// segmentation-offload packets stay whole, so the cost is one message per packet, not per byte.
#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

extern "C" {
#include <libnetfilter_queue/libnetfilter_queue.h>
}

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_stop{false};  // set by SIGTERM/SIGINT; lock-free, so safe in a handler
void OnSignal(int) { g_stop.store(true); }

struct Options {
  int queue = 0;
  double delay_ms = 0;
  double loss = 0;  // a fraction, 0..1
  uint64_t seed = 1;
  double max_seconds = 3600;  // a forgotten instance does not outlive this
};

struct Held {
  uint32_t id;
  Clock::time_point due;
};

struct State {
  nfq_q_handle* queue = nullptr;
  Clock::duration delay{};
  double loss = 0;
  std::mt19937_64 rng;
  std::uniform_real_distribution<double> uniform{0.0, 1.0};
  std::deque<Held> held;
  uint64_t passed = 0, dropped = 0, overruns = 0;
};

int OnPacket(nfq_q_handle* queue, nfgenmsg*, nfq_data* packet, void* data) {
  auto* s = static_cast<State*>(data);
  const nfqnl_msg_packet_hdr* header = nfq_get_msg_packet_hdr(packet);
  if (header == nullptr) return 0;
  const uint32_t id = ntohl(header->packet_id);
  if (s->loss > 0 && s->uniform(s->rng) < s->loss) {
    ++s->dropped;
    return nfq_set_verdict(queue, id, NF_DROP, 0, nullptr);
  }
  if (s->delay == Clock::duration::zero()) {
    ++s->passed;
    return nfq_set_verdict(queue, id, NF_ACCEPT, 0, nullptr);
  }
  s->held.push_back({id, Clock::now() + s->delay});
  return 0;
}

// Accepts every held packet that is due (all of them with `all`) with one batch verdict: it covers
// every id up to the last one released, and ids are handed out in arrival order.
void Release(State& s, bool all) {
  const auto now = Clock::now();
  uint32_t last = 0;
  bool any = false;
  while (!s.held.empty() && (all || s.held.front().due <= now)) {
    last = s.held.front().id;
    any = true;
    s.held.pop_front();
    ++s.passed;
  }
  if (any) nfq_set_verdict_batch(s.queue, last, NF_ACCEPT);
}

bool ParseDouble(const char* text, double& out) {
  char* end = nullptr;
  errno = 0;
  out = std::strtod(text, &end);
  return errno == 0 && end != text && *end == '\0';
}

void Usage(FILE* to) {
  std::fprintf(to,
               "usage: weightport-netem [--queue Q] [--delay-ms D] [--loss P] [--seed S] [--max-seconds T]\n"
               "  Holds each packet of NFQUEUE queue Q for D ms (default 0) and drops it with probability\n"
               "  P (a fraction, default 0); exits on SIGTERM or after T seconds (default 3600).\n");
}

int ParseArgs(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      Usage(stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "weightport-netem: %s needs a value\n", arg.c_str());
      return 2;
    }
    double v = 0;
    if (!ParseDouble(argv[++i], v)) {
      std::fprintf(stderr, "weightport-netem: %s: '%s' is not a number\n", arg.c_str(), argv[i]);
      return 2;
    }
    if (arg == "--queue" && v >= 0 && v <= 65535) {
      o.queue = static_cast<int>(v);
    } else if (arg == "--delay-ms" && v >= 0 && v <= 10'000) {
      o.delay_ms = v;
    } else if (arg == "--loss" && v >= 0 && v <= 1) {
      o.loss = v;
    } else if (arg == "--seed" && v >= 0) {
      o.seed = static_cast<uint64_t>(v);
    } else if (arg == "--max-seconds" && v > 0) {
      o.max_seconds = v;
    } else {
      std::fprintf(stderr, "weightport-netem: bad option or out-of-range value: %s %s\n", arg.c_str(),
                   argv[i]);
      Usage(stderr);
      return 2;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (int rc = ParseArgs(argc, argv, o); rc != 0) return rc;

  nfq_handle* handle = nfq_open();
  if (handle == nullptr) {
    std::fprintf(stderr, "weightport-netem: cannot open an nfnetlink queue socket: %s (root needed)\n",
                 std::strerror(errno));
    return 1;
  }
  State s;
  s.delay =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(o.delay_ms));
  s.loss = o.loss;
  s.rng.seed(o.seed);
  s.queue = nfq_create_queue(handle, static_cast<uint16_t>(o.queue), &OnPacket, &s);
  if (s.queue == nullptr) {
    std::fprintf(stderr, "weightport-netem: cannot bind queue %d: %s (another instance on it?)\n", o.queue,
                 std::strerror(errno));
    nfq_close(handle);
    return 1;
  }
  // Metadata only; keep offloaded (GSO) packets whole; if the queue overflows, pass packets
  // rather than drop them, so the emulated loss stays the only loss.
  nfq_set_mode(s.queue, NFQNL_COPY_META, 0);
  nfq_set_queue_maxlen(s.queue, 1 << 16);
  const uint32_t flags = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO;
  nfq_set_queue_flags(s.queue, flags, flags);
  nfnl_rcvbufsiz(nfq_nfnlh(handle), 32u << 20);

  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);

  std::fprintf(stderr, "weightport-netem: queue %d, delay %.3f ms, loss %.4f\n", o.queue, o.delay_ms, o.loss);
  const int fd = nfq_fd(handle);
  const auto end = Clock::now() +
                   std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.max_seconds));
  alignas(8) static char buffer[1 << 16];
  while (!g_stop.load() && Clock::now() < end) {
    auto wait = std::chrono::milliseconds(100);
    if (!s.held.empty()) {
      wait = std::chrono::duration_cast<std::chrono::milliseconds>(s.held.front().due - Clock::now());
      if (wait.count() < 0) wait = std::chrono::milliseconds(0);
    }
    pollfd p{fd, POLLIN, 0};
    // Round up to the next millisecond boundary so a wakeup is never early and wasted.
    const long ms = static_cast<long>(wait.count()) + 1;
    const timespec ts{ms / 1000, (ms % 1000) * 1'000'000};
    if (ppoll(&p, 1, &ts, nullptr) > 0) {
      for (int i = 0; i < 4096; ++i) {  // drain what is queued, bounded so verdicts are not starved
        const ssize_t n = recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
        if (n > 0) {
          nfq_handle_packet(handle, buffer, static_cast<int>(n));
          continue;
        }
        if (n < 0 && errno == ENOBUFS) {  // the kernel dropped messages: those packets passed
          ++s.overruns;
          continue;
        }
        break;
      }
    }
    Release(s, /*all=*/false);
  }
  Release(s, /*all=*/true);
  std::fprintf(stderr, "weightport-netem: passed %llu, dropped %llu, socket overruns %llu\n",
               static_cast<unsigned long long>(s.passed), static_cast<unsigned long long>(s.dropped),
               static_cast<unsigned long long>(s.overruns));
  nfq_destroy_queue(s.queue);
  nfq_close(handle);
  return 0;
}
