#include "weightport/core/slice.h"
#include "core/core_test_util.h"

#include <gtest/gtest.h>

#include <random>

namespace weightport {
namespace {

using core_test::InSlice;
using core_test::Numel;

// ---- per-element reference -------------------------------------------------------------------

std::vector<int64_t> Unravel(int64_t i, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (size_t k = s.size(); k-- > 0;) {
    idx[k] = i % s[k];
    i /= s[k];
  }
  return idx;
}

bool InBox(const std::vector<int64_t>& idx, const Box& b) {
  for (size_t k = 0; k < idx.size(); ++k)
    if (idx[k] < b.start[k] || idx[k] >= b.start[k] + b.length[k]) return false;
  return true;
}

// Index of tensor element i in the packed buffer of `holder` (which holds it).
int64_t PackedIndex(int64_t i, const Slice& holder, const Shape& shape) {
  if (holder.is_flat()) return i - holder.flat().start;
  const auto idx = Unravel(i, shape);
  int64_t p = 0;
  for (size_t k = 0; k < idx.size(); ++k) p = p * holder.box().length[k] + (idx[k] - holder.box().start[k]);
  return p;
}

std::vector<SliceRun> NaiveRuns(const Slice& s, const Shape& shape, uint64_t es) {
  std::vector<SliceRun> runs;
  uint64_t packed = 0;
  for (int64_t i = 0; i < Numel(shape); ++i) {
    if (!InSlice(i, s, shape)) continue;
    const uint64_t off = static_cast<uint64_t>(i) * es;
    if (!runs.empty() && runs.back().tensor_offset + runs.back().length == off)
      runs.back().length += es;
    else
      runs.push_back({off, packed, es});
    packed += es;
  }
  return runs;
}

std::vector<CopyRun> NaiveCopyRuns(const Slice& piece, const Shape& shape, uint64_t es, const Slice& src,
                                   const Slice& dst) {
  std::vector<CopyRun> runs;
  for (int64_t i = 0; i < Numel(shape); ++i) {
    if (!InSlice(i, piece, shape)) continue;
    const uint64_t s = PackedIndex(i, src, shape) * es, d = PackedIndex(i, dst, shape) * es;
    CopyRun* last = runs.empty() ? nullptr : &runs.back();
    if (last && last->src_offset + last->length == s && last->dst_offset + last->length == d)
      last->length += es;
    else
      runs.push_back({s, d, es});
  }
  return runs;
}

// ---- random generators -----------------------------------------------------------------------

struct Gen {
  std::mt19937_64 rng{0x5eed};
  int64_t Uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }
  Shape RandomShape() {
    static constexpr int kRanks[] = {0, 1, 2, 2, 3, 3, 4, 5};  // rank 0..5, weighted to 2..4
    Shape s(kRanks[Uniform(0, 7)]);
    for (auto& d : s) d = Uniform(0, 4) == 0 ? 1 : Uniform(2, s.size() > 3 ? 4 : 7);
    if (!s.empty() && Uniform(0, 15) == 0) s[Uniform(0, s.size() - 1)] = 0;
    return s;
  }
  // Mostly non-empty boxes: per dim full, a prefix/suffix, or an inner range.
  Box RandomBox(const Shape& shape) {
    Box b;
    for (int64_t d : shape) {
      if (d == 0) {
        b.start.push_back(0);
        b.length.push_back(0);
        continue;
      }
      const int64_t pick = Uniform(0, 3);
      const int64_t start = pick == 0 ? 0 : Uniform(0, d - 1);
      b.start.push_back(start);
      b.length.push_back(pick <= 1 ? d - start : Uniform(1, d - start));
    }
    if (!shape.empty() && Uniform(0, 15) == 0) b.length[Uniform(0, shape.size() - 1)] = 0;
    return b;
  }
  Slice RandomSlice(const Shape& shape) {
    if (Uniform(0, 2) == 0) {
      const int64_t n = Numel(shape), start = n > 0 && Uniform(0, 7) ? Uniform(0, n - 1) : Uniform(0, n);
      return Slice::MakeFlat(start, start < n && Uniform(0, 7) ? Uniform(1, n - start) : n - start);
    }
    return RandomBox(shape);
  }
};

constexpr int kCases = 5000;

TEST(SliceTest, ValidateRejectsBadSlices) {
  const Shape shape{4, 6};
  EXPECT_TRUE(ValidateSlice(Slice::Full(shape), shape).ok());
  EXPECT_TRUE(ValidateSlice(Slice::MakeBox({4, 0}, {0, 6}), shape).ok());  // empty at the edge
  EXPECT_TRUE(ValidateSlice(Slice::MakeFlat(24, 0), shape).ok());
  EXPECT_TRUE(ValidateSlice(Slice(), Shape{}).ok());  // the scalar's element
  EXPECT_EQ(ValidateSlice(Slice::MakeBox({0}, {4}), shape).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSlice(Slice::MakeBox({0, 0}, {4}), shape).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSlice(Slice::MakeBox({0, 0}, {-1, 6}), shape).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSlice(Slice::MakeBox({0, 1}, {4, 6}), shape).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(ValidateSlice(Slice::MakeBox({-1, 0}, {1, 6}), shape).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(ValidateSlice(Slice::MakeBox({INT64_MAX, 0}, {INT64_MAX, 6}), shape).code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(ValidateSlice(Slice::MakeFlat(20, 5), shape).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(ValidateSlice(Slice::MakeFlat(INT64_MAX, INT64_MAX), shape).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(ValidateSlice(Slice::MakeFlat(-1, 1), shape).code(), StatusCode::kOutOfRange);
  EXPECT_FALSE(ValidateSlice(Slice::MakeFlat(0, 0), Shape{-1}).ok());
  const Status s = ValidateSlice(Slice::MakeBox({0, 1}, {4, 6}), shape);
  EXPECT_NE(s.message().find("dimension 1"), std::string::npos) << s.ToString();
}

TEST(SliceTest, ToStringAndCounts) {
  EXPECT_EQ(Slice::MakeBox({0, 2}, {4, 4}).ToString(), "[0:4, 2:6]");
  EXPECT_EQ(Slice::MakeFlat(10, 20).ToString(), "flat[10:30]");
  EXPECT_EQ(Slice::MakeBox({0, 2}, {4, 4}).num_elements(), 16);
  EXPECT_EQ(Slice().num_elements(), 1);
  EXPECT_TRUE(Slice::MakeBox({0, 2}, {4, 0}).empty());
  EXPECT_EQ(Slice::Full({3, 5}), Slice::MakeBox({0, 0}, {3, 5}));
}

TEST(SliceTest, ContiguousRunsMatchPerElementReference) {
  Gen g;
  int multi_run = 0;
  int64_t elements = 0;
  for (int c = 0; c < kCases; ++c) {
    const Shape shape = g.RandomShape();
    const Slice s = g.RandomSlice(shape);
    const uint64_t es = 1ull << g.Uniform(0, 3);
    auto runs = ContiguousRuns(s, shape, es);
    ASSERT_TRUE(runs.ok()) << runs.status().ToString();
    ASSERT_EQ(*runs, NaiveRuns(s, shape, es)) << ShapeToString(shape) << " " << s.ToString();
    auto stats = CountContiguousRuns(s, shape, es);
    ASSERT_TRUE(stats.ok());
    EXPECT_EQ(stats->runs, runs->size());
    EXPECT_EQ(stats->bytes, static_cast<uint64_t>(s.num_elements()) * es);
    multi_run += runs->size() > 1;
    elements += s.num_elements();
  }
  // The generator exercises non-trivial slices.
  EXPECT_GT(multi_run, kCases / 6);
  EXPECT_GT(elements, 5 * kCases);
}

TEST(SliceTest, ScalarAndEmptyRuns) {
  EXPECT_EQ(*ContiguousRuns(Slice(), {}, 4), (std::vector<SliceRun>{{0, 0, 4}}));
  EXPECT_TRUE(ContiguousRuns(Slice::MakeBox({1, 0}, {0, 3}), {2, 3}, 4)->empty());
  EXPECT_TRUE(ContiguousRuns(Slice::MakeFlat(2, 0), {2, 3}, 4)->empty());
  EXPECT_TRUE(ContiguousRuns(Slice::Full({0, 3}), {0, 3}, 4)->empty());
  EXPECT_FALSE(ContiguousRuns(Slice::Full({2}), {2}, 0).ok());
  EXPECT_FALSE(ContiguousRuns(Slice::Full({INT64_MAX / 2}), {INT64_MAX / 2}, 4).ok());
}

TEST(SliceTest, LargeTensorRuns) {
  const Shape shape{151936, 8192};
  const uint64_t bf16 = 2;
  struct Case {
    Slice slice;
    uint64_t runs;
  };
  const std::vector<Case> cases{
      {Slice::Full(shape), 1},
      {Slice::MakeBox({50646, 0}, {50645, 8192}), 1},       // vocab-parallel rows
      {Slice::MakeBox({0, 4096}, {151936, 2048}), 151936},  // column block: one run per row
      {Slice::MakeBox({7, 0}, {1, 100}), 1},
      {Slice::MakeFlat(12345, 1000000000), 1},
  };
  for (const auto& c : cases) {
    auto stats = CountContiguousRuns(c.slice, shape, bf16);
    ASSERT_TRUE(stats.ok());
    EXPECT_EQ(stats->runs, c.runs) << c.slice.ToString();
    EXPECT_EQ(stats->bytes, static_cast<uint64_t>(c.slice.num_elements()) * bf16);
    uint64_t n = 0, bytes = 0, next_packed = 0, last_end = 0;
    ASSERT_TRUE(ForEachContiguousRun(c.slice, shape, bf16, [&](const SliceRun& r) {
                  EXPECT_EQ(r.packed_offset, next_packed);
                  EXPECT_GE(r.tensor_offset, last_end);
                  next_packed += r.length;
                  last_end = r.tensor_offset + r.length;
                  ++n;
                  bytes += r.length;
                }).ok());
    EXPECT_EQ(n, c.runs);
    EXPECT_EQ(bytes, stats->bytes);
  }
  // A rank-3 expert stack [128, 4096, 1536] split on the last dim: one run per (expert, row).
  auto stats = CountContiguousRuns(Slice::MakeBox({0, 0, 768}, {128, 4096, 768}), {128, 4096, 1536}, bf16);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->runs, 128u * 4096u);
  EXPECT_EQ(stats->bytes, 128ull * 4096 * 768 * bf16);
}

TEST(SliceTest, FlatToBoxesMatchesPerElementReference) {
  Gen g;
  for (int c = 0; c < kCases; ++c) {
    const Shape shape = g.RandomShape();
    const int64_t n = Numel(shape), start = g.Uniform(0, n);
    const FlatRange flat{start, g.Uniform(0, n - start)};
    auto boxes = FlatToBoxes(flat, shape);
    ASSERT_TRUE(boxes.ok()) << boxes.status().ToString();
    const size_t limit = shape.empty() ? 1 : 2 * shape.size() - 1;
    EXPECT_LE(boxes->size(), limit) << ShapeToString(shape);
    // Every element of the range in exactly one box, boxes non-empty and in flat order.
    int64_t next = flat.start;
    for (const Box& b : *boxes) {
      ASSERT_TRUE(ValidateSlice(b, shape).ok());
      ASSERT_GT(b.num_elements(), 0);
      for (int64_t i = 0; i < n; ++i) {
        const bool in = InBox(Unravel(i, shape), b);
        ASSERT_EQ(in, i >= next && i < next + b.num_elements())
            << ShapeToString(shape) << " " << Slice(flat).ToString() << " box " << Slice(b).ToString();
      }
      next += b.num_elements();
    }
    EXPECT_EQ(next, flat.end());
  }
  EXPECT_FALSE(FlatToBoxes({5, 10}, {3, 4}).ok());
  auto big = FlatToBoxes({3, 151936LL * 8192 - 10}, {151936, 8192});
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->size(), 3u);
}

TEST(SliceTest, IntersectOverlapsContainsMatchReference) {
  Gen g;
  for (int c = 0; c < kCases; ++c) {
    const Shape shape = g.RandomShape();
    const Slice a = g.RandomSlice(shape), b = g.RandomSlice(shape);
    auto pieces = Intersect(a, b, shape);
    ASSERT_TRUE(pieces.ok()) << pieces.status().ToString();
    if (a.is_box() == b.is_box()) {
      EXPECT_LE(pieces->size(), 1u);
    }
    bool any = false, a_in_b = true;
    int64_t last_piece = -1, last_elem = -1;
    for (int64_t i = 0; i < Numel(shape); ++i) {
      const bool want = InSlice(i, a, shape) && InSlice(i, b, shape);
      any |= want;
      if (InSlice(i, a, shape) && !InSlice(i, b, shape)) a_in_b = false;
      int hits = 0, which = -1;
      for (size_t p = 0; p < pieces->size(); ++p)
        if (InSlice(i, (*pieces)[p], shape)) ++hits, which = static_cast<int>(p);
      ASSERT_EQ(hits, want ? 1 : 0) << ShapeToString(shape) << " " << a.ToString() << " " << b.ToString();
      if (want) {  // pieces in row-major order
        ASSERT_GE(which, last_piece);
        last_piece = which;
        last_elem = i;
      }
    }
    (void)last_elem;
    for (const Slice& p : *pieces) EXPECT_FALSE(p.empty());
    EXPECT_EQ(*Overlaps(a, b, shape), any);
    EXPECT_EQ(*Contains(b, a, shape), a_in_b)
        << ShapeToString(shape) << " " << a.ToString() << " in " << b.ToString();
  }
  EXPECT_FALSE(Intersect(Slice::MakeBox({0}, {3}), Slice::MakeBox({0, 0}, {1, 1}), {2, 2}).ok());
}

TEST(SliceTest, SubtractBoxMatchesReference) {
  Gen g;
  for (int c = 0; c < kCases; ++c) {
    Shape shape = g.RandomShape();
    const Box a = g.RandomBox(shape), b = g.RandomBox(shape);
    const std::vector<Box> rest = SubtractBox(a, b);
    EXPECT_LE(rest.size(), 2 * shape.size() + 1);
    for (int64_t i = 0; i < Numel(shape); ++i) {
      const auto idx = Unravel(i, shape);
      int hits = 0;
      for (const Box& r : rest) hits += InBox(idx, r);
      ASSERT_EQ(hits, InBox(idx, a) && !InBox(idx, b) ? 1 : 0);
    }
  }
}

TEST(SliceTest, CopyRunsMatchPerElementReference) {
  Gen g;
  int nonempty = 0;
  for (int c = 0; c < kCases; ++c) {
    const Shape shape = g.RandomShape();
    const Slice src = g.Uniform(0, 5) == 0 ? Slice::Full(shape) : g.RandomSlice(shape);
    const Slice dst = g.RandomSlice(shape);
    auto pieces = Intersect(src, dst, shape);
    ASSERT_TRUE(pieces.ok());
    const uint64_t es = 1ull << g.Uniform(0, 2);
    for (const Slice& piece : *pieces) {
      auto runs = CopyRuns(piece, shape, es, src, dst);
      ASSERT_TRUE(runs.ok()) << runs.status().ToString();
      ASSERT_EQ(*runs, NaiveCopyRuns(piece, shape, es, src, dst))
          << ShapeToString(shape) << " piece " << piece.ToString() << " src " << src.ToString() << " dst "
          << dst.ToString();
      ++nonempty;
    }
  }
  EXPECT_GT(nonempty, kCases / 4);
  // A piece outside a holder is refused.
  EXPECT_FALSE(CopyRuns(Slice::MakeBox({0}, {3}), {4}, 1, Slice::MakeBox({0}, {2}), Slice::Full({4})).ok());
  EXPECT_FALSE(CopyRuns(Slice::MakeBox({0}, {3}), {4}, 1, Slice::Full({4}), Slice::MakeFlat(1, 3)).ok());
}

TEST(SliceTest, CopyRunsBetweenColumnShardsCoalesce) {
  // Column blocks [0:8, 2:4] held by two boxes of the same width: one run in both buffers.
  const Shape shape{8, 6};
  const Slice piece = Slice::MakeBox({0, 2}, {8, 2});
  auto runs = CopyRuns(piece, shape, 2, piece, piece);
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(*runs, (std::vector<CopyRun>{{0, 0, 32}}));
  // From the full tensor into the shard: one run per row.
  runs = CopyRuns(piece, shape, 2, Slice::Full(shape), piece);
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(runs->size(), 8u);
  EXPECT_EQ((*runs)[1], (CopyRun{16, 4, 4}));
}

}  // namespace
}  // namespace weightport
