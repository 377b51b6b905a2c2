// gloo_broadcast: the Gloo peer baseline of the fan-out benchmark (see README.md here).
//
// Rank 0 broadcasts --bytes to ranks 1..W-1 with gloo::broadcast over Gloo's TCP transport (Debian
// libgloo-dev 0.0~git20220518); ranks meet through a gloo::rendezvous::FileStore on a shared directory.
// One warm-up and --repeat timed iterations; each is timed from a barrier before the broadcast to its end
// on this rank, and on the root to a barrier after it (every receiver has the bytes). Receivers check
// the bytes outside the timed region. Prints one JSON line on stdout; errors go to stderr, exit 1
// (2 for usage).
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace {

struct Args {
  int rank = -1;
  int world = 0;
  size_t bytes = 0;
  int repeat = 3;
  std::string store_dir;
  std::string iface;
  int timeout_s = 300;
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "gloo_broadcast: %s\nusage: gloo_broadcast --rank R --world W --bytes B [--repeat K] "
               "--store-dir DIR --iface IFACE [--timeout-s S]\n",
               why.c_str());
  std::exit(2);
}

// An integer of at least `min`, else a usage error.
long long ParseInt(const std::string& flag, const char* text, long long min) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < min)
    Usage(flag + " needs an integer >= " + std::to_string(min) + ", got '" + text + "'");
  return v;
}

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i += 2) {
    std::string flag = argv[i];
    if (i + 1 >= argc) Usage(flag + " needs a value");
    const char* v = argv[i + 1];
    if (flag == "--rank")
      a.rank = ParseInt(flag, v, 0);
    else if (flag == "--world")
      a.world = ParseInt(flag, v, 2);
    else if (flag == "--bytes")
      a.bytes = ParseInt(flag, v, 1);
    else if (flag == "--repeat")
      a.repeat = ParseInt(flag, v, 1);
    else if (flag == "--store-dir")
      a.store_dir = v;
    else if (flag == "--iface")
      a.iface = v;
    else if (flag == "--timeout-s")
      a.timeout_s = ParseInt(flag, v, 1);
    else
      Usage("unknown option '" + flag + "'");
  }
  if (a.world == 0 || a.rank < 0 || a.bytes == 0) Usage("--rank, --world and --bytes are required");
  if (a.rank >= a.world) Usage("--rank must be in 0..world-1");
  if (a.repeat > 250) Usage("--repeat must be at most 250 (the pattern must differ between iterations)");
  if (a.store_dir.empty() || a.iface.empty()) Usage("--store-dir and --iface are required");
  return a;
}

// Byte i of iteration `it` is (i*31 + it) & 0xff; it depends on i mod 256 only, so one 256-byte period
// is built and copied (fill) or compared (check) along the buffer.
std::array<uint8_t, 256> Period(int it) {
  std::array<uint8_t, 256> p;
  for (size_t i = 0; i < p.size(); i++) p[i] = static_cast<uint8_t>(i * 31 + it);
  return p;
}

void Fill(std::vector<uint8_t>& buf, int it) {
  auto p = Period(it);
  for (size_t off = 0; off < buf.size(); off += p.size())
    std::memcpy(buf.data() + off, p.data(), std::min(p.size(), buf.size() - off));
}

bool Check(const std::vector<uint8_t>& buf, int it) {
  auto p = Period(it);
  for (size_t off = 0; off < buf.size(); off += p.size())
    if (std::memcmp(buf.data() + off, p.data(), std::min(p.size(), buf.size() - off)) != 0) return false;
  return true;
}

void Barrier(const std::shared_ptr<gloo::Context>& ctx) {
  gloo::BarrierOptions opts(ctx);
  gloo::barrier(opts);
}

}  // namespace

int main(int argc, char** argv) {
  Args a = ParseArgs(argc, argv);
  try {
    const auto timeout = std::chrono::seconds(a.timeout_s);
    gloo::transport::tcp::attr attr;
    attr.iface = a.iface;
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(a.store_dir);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(a.rank, a.world);
    ctx->setTimeout(timeout);  // bounds the rendezvous and every collective below
    ctx->connectFullMesh(store, dev);

    std::vector<uint8_t> buf(a.bytes);
    std::vector<double> seconds;
    bool verified = true;
    for (int it = 0; it <= a.repeat; it++) {  // iteration 0 is the warm-up
      if (a.rank == 0) Fill(buf, it);
      gloo::BroadcastOptions opts(ctx);
      opts.setRoot(0);
      opts.setOutput(buf.data(), buf.size());  // in place: the root sends it, the others receive into it

      Barrier(ctx);
      auto t0 = std::chrono::steady_clock::now();
      gloo::broadcast(opts);
      if (a.rank == 0) Barrier(ctx);  // the root is done when every receiver is
      auto t1 = std::chrono::steady_clock::now();
      if (a.rank != 0) Barrier(ctx);

      if (it > 0) seconds.push_back(std::chrono::duration<double>(t1 - t0).count());
      if (a.rank != 0 && !Check(buf, it)) {
        std::fprintf(stderr,
                     "gloo_broadcast: rank %d: iteration %d: received bytes differ from the pattern\n",
                     a.rank, it);
        verified = false;
      }
    }

    std::string secs;
    for (double s : seconds) secs += (secs.empty() ? "" : ", ") + std::to_string(s);
    std::printf(
        "{\"system\": \"gloo\", \"rank\": %d, \"world\": %d, \"bytes\": %zu, \"seconds\": [%s], "
        "\"verified\": %s}\n",
        a.rank, a.world, a.bytes, secs.c_str(), verified ? "true" : "false");
    return verified ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_broadcast: rank %d of %d: %s\n", a.rank, a.world, e.what());
    return 1;
  }
}
