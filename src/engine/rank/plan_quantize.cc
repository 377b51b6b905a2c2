// Quantising to e4m3 in flight, on the ranks' side: the bands a quantise job is cut into, running
// them on the quantiser threads, and a destination's quantising of what landed, which copies the
// bands whose inputs did not change from the live copy instead of quantising them again.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>

#include "plan_rank_impl.h"
#include "weightport/core/hash.h"
#include "weightport/kernels/convert.h"

namespace weightport {

using namespace plan_rank_internal;

// Cuts each job into bands of whole block rows of about `band_bytes` of input, so that the threads
// quantising share a large shard: a band's blocks are whole, so it quantises as it would in the
// whole matrix. Gathers are cut at the bands' edges and rebased into their band.
void plan_rank_internal::SplitIntoBands(std::vector<QuantizeJob>& jobs, std::vector<Run>& gathers,
                                        uint64_t band_bytes) {
  constexpr int64_t kBlock = kernels::kFp8Block;
  std::vector<QuantizeJob> out_jobs;
  std::vector<Run> out_gathers;
  for (const QuantizeJob& job : jobs) {
    if (job.scaling == kernels::Fp8Scaling::kPerTensor) {
      out_jobs.push_back(job);
      out_jobs.back().gather_begin = static_cast<uint32_t>(out_gathers.size());
      out_gathers.insert(out_gathers.end(), gathers.begin() + job.gather_begin,
                         gathers.begin() + job.gather_end);
      out_jobs.back().gather_end = static_cast<uint32_t>(out_gathers.size());
      continue;
    }
    const uint64_t row_bytes = static_cast<uint64_t>(job.cols) * DTypeSize(job.from);
    const int64_t band_rows =
        std::max<int64_t>(kBlock, static_cast<int64_t>(band_bytes / row_bytes) / kBlock * kBlock);
    std::vector<Run> runs(gathers.begin() + job.gather_begin, gathers.begin() + job.gather_end);
    std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.to < b.to; });
    size_t next = 0;  // the first run not wholly in an earlier band
    for (int64_t r0 = 0; r0 < job.rows; r0 += band_rows) {
      const int64_t rows = std::min(band_rows, job.rows - r0);
      const uint64_t lo = static_cast<uint64_t>(r0) * row_bytes,
                     hi = lo + static_cast<uint64_t>(rows) * row_bytes;
      const int64_t block_cols = (job.cols + kBlock - 1) / kBlock;
      QuantizeJob band = job;
      band.out = job.out + static_cast<uint64_t>(r0 * job.cols);  // e4m3: a byte per element
      band.scales_at = job.scales_at + static_cast<uint64_t>(r0 / kBlock * block_cols) * sizeof(float);
      band.rows = rows;
      band.scales = (rows + kBlock - 1) / kBlock * block_cols;
      band.gather_begin = static_cast<uint32_t>(out_gathers.size());
      for (size_t i = next; i < runs.size() && runs[i].to < hi; ++i) {
        const uint64_t from = std::max(runs[i].to, lo), to = std::min(runs[i].to + runs[i].length, hi);
        if (to <= from) continue;
        out_gathers.push_back({runs[i].from + (from - runs[i].to), from - lo, to - from});
        if (runs[i].to + runs[i].length <= hi) next = i + 1;
      }
      band.gather_end = static_cast<uint32_t>(out_gathers.size());
      out_jobs.push_back(band);
    }
  }
  jobs = std::move(out_jobs);
  gathers = std::move(out_gathers);
}

uint64_t plan_rank_internal::BandOutputHash(const std::byte* base, const QuantizeJob& q) {
  const uint64_t bytes = Xxh3(base + q.out, static_cast<size_t>(q.rows * q.cols));
  const uint64_t scales = Xxh3(base + q.scales_at, static_cast<size_t>(q.scales) * sizeof(float));
  return bytes * 0x9E3779B185EBCA87ull + scales;
}

namespace {

// What one thread needs to quantise a band: its gathered matrix and its scales.
struct Scratch {
  std::vector<std::byte> matrix;
  std::vector<float> scales;
};

// Gathers band q's matrix from `base` and quantises it into its output there (shapes checked when
// the plan was compiled).
void Quantize(std::byte* base, const QuantizeJob& q, const std::vector<Run>& gathers, Scratch& scratch) {
  scratch.matrix.resize(static_cast<size_t>(q.rows * q.cols) * DTypeSize(q.from));
  for (uint32_t i = q.gather_begin; i < q.gather_end; ++i)
    std::memcpy(scratch.matrix.data() + gathers[i].to, base + gathers[i].from, gathers[i].length);
  scratch.scales.resize(static_cast<size_t>(q.scales));
  kernels::QuantizeE4m3(q.from, scratch.matrix.data(), q.rows, q.cols, q.scaling,
                        reinterpret_cast<uint8_t*>(base + q.out), scratch.scales.data())
      .IgnoreError();
  std::memcpy(base + q.scales_at, scratch.scales.data(), scratch.scales.size() * sizeof(float));
}

}  // namespace

void plan_rank_internal::RunQuantizeJobs(std::byte* base, const std::vector<QuantizeJob>& jobs,
                                         const std::vector<Run>& gathers, WorkerPool* pool) {
  ForEachIndex<Scratch>(pool, jobs.size(),
                        [&](size_t j, Scratch& scratch) { Quantize(base, jobs[j], gathers, scratch); });
}

void plan_rank_internal::MapBandsToChunks(CompiledRank& r) {
  // Every incoming run's bytes within a copy, by where they start (landing areas do not overlap).
  struct Landed {
    uint64_t begin, end;
    uint32_t chunk;
  };
  std::vector<Landed> landed;
  for (uint32_t c = 0; c < r.in_chunks.size(); ++c)
    for (uint32_t i = r.in_chunks[c].run_begin; i < r.in_chunks[c].run_end; ++i)
      landed.push_back({r.in_runs[i].to, r.in_runs[i].to + r.in_runs[i].length, c});
  std::sort(landed.begin(), landed.end(), [](const Landed& a, const Landed& b) { return a.begin < b.begin; });
  r.band_chunk_begin.assign(1, 0);
  r.band_chunks.clear();
  std::vector<uint32_t> mine;
  for (const QuantizeJob& band : r.in_quantize) {
    mine.clear();
    for (uint32_t g = band.gather_begin; g < band.gather_end; ++g) {
      const uint64_t lo = r.in_gathers[g].from, hi = lo + r.in_gathers[g].length;
      auto it =
          std::partition_point(landed.begin(), landed.end(), [lo](const Landed& l) { return l.end <= lo; });
      for (; it != landed.end() && it->begin < hi; ++it) mine.push_back(it->chunk);
    }
    std::sort(mine.begin(), mine.end());
    mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
    r.band_chunks.insert(r.band_chunks.end(), mine.begin(), mine.end());
    r.band_chunk_begin.push_back(static_cast<uint32_t>(r.band_chunks.size()));
  }
}

std::vector<uint8_t> plan_rank_internal::QuantizeLanded(
    PlanRank::Impl& r, int staging, const std::vector<uint8_t>& kept,
    const std::function<void(size_t band, bool reused)>& band_done) {
  const int live = staging ^ 1;
  std::byte* to = r.at(r.c->mine->CopyOffset(staging));
  const std::byte* from = r.at(r.c->mine->CopyOffset(live));
  const size_t n = r.c->in_quantize.size();
  // The live copy's bands are known only for the version it holds, quantised (or copied) whole.
  const bool live_known = r.options.delta && r.live_version != 0 && r.copy_version[live] == r.live_version &&
                          r.band_hashes[live].size() == n;
  std::vector<uint8_t> unchanged(n, live_known);  // every chunk the band reads was kept
  for (size_t j = 0; j < n; ++j)
    for (uint32_t i = r.c->band_chunk_begin[j]; unchanged[j] && i < r.c->band_chunk_begin[j + 1]; ++i)
      unchanged[j] = kept[r.c->band_chunks[i]] != 0;
  std::vector<uint64_t>& hashes = r.band_hashes[staging];
  hashes.assign(n, 0);
  std::vector<uint8_t> reused(n, 0);
  ForEachIndex<Scratch>(r.workers.get(), n, [&](size_t j, Scratch& scratch) {
    const QuantizeJob& q = r.c->in_quantize[j];
    // Its inputs are the live copy's: so is its output, unless someone wrote to the live shard
    // since. Copied, then hashed where it landed: a write racing the copy shows too.
    if (unchanged[j]) {
      std::memcpy(to + q.out, from + q.out, static_cast<size_t>(q.rows * q.cols));
      std::memcpy(to + q.scales_at, from + q.scales_at, static_cast<size_t>(q.scales) * sizeof(float));
      hashes[j] = BandOutputHash(to, q);
      reused[j] = hashes[j] == r.band_hashes[live][j];
    }
    if (!reused[j]) {
      Quantize(to, q, r.c->in_gathers, scratch);
      hashes[j] = BandOutputHash(to, q);
    }
    if (band_done) band_done(j, reused[j] != 0);
  });
  return reused;
}

}  // namespace weightport
