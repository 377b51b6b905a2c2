#include "weightport/control/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <thread>
#include <vector>

namespace weightport {
namespace {

TEST(MetricsTest, CountersAdd) {
  Metrics m;
  m.Add("wp_chunks_total", {{"peer", "a"}});
  m.Add("wp_chunks_total", {{"peer", "a"}}, 2.5);
  m.Add("wp_chunks_total", {{"peer", "b"}}, 4);
  EXPECT_EQ(m.Value("wp_chunks_total", {{"peer", "a"}}), 3.5);
  EXPECT_EQ(m.Value("wp_chunks_total", {{"peer", "b"}}), 4);
  EXPECT_EQ(m.Value("wp_chunks_total", {{"peer", "c"}}), 0);
  EXPECT_EQ(m.Value("wp_absent_total", {}), 0);
}

TEST(MetricsTest, LabelOrderNamesTheSameSeries) {
  Metrics m;
  m.Add("wp_x_total", {{"a", "1"}, {"b", "2"}});
  m.Add("wp_x_total", {{"b", "2"}, {"a", "1"}});
  EXPECT_EQ(m.Value("wp_x_total", {{"b", "2"}, {"a", "1"}}), 2);
  EXPECT_EQ(m.RenderPrometheus(), "# TYPE wp_x_total counter\nwp_x_total{a=\"1\",b=\"2\"} 2\n");
}

TEST(MetricsTest, GaugesSet) {
  Metrics m;
  m.Set("wp_inflight", {{"rank", "0"}}, 5);
  m.Set("wp_inflight", {{"rank", "0"}}, 3);
  EXPECT_EQ(m.Value("wp_inflight", {{"rank", "0"}}), 3);
  m.Add("wp_inflight", {{"rank", "0"}}, -1);  // gauges go down too
  EXPECT_EQ(m.Value("wp_inflight", {{"rank", "0"}}), 2);
  m.Set("wp_inflight", {{"rank", "0"}}, -7.25);
  EXPECT_EQ(m.Value("wp_inflight", {{"rank", "0"}}), -7.25);
}

TEST(MetricsTest, RendersGoldenText) {
  Metrics m;
  ASSERT_TRUE(m.Describe("wp_bytes_total", MetricType::kCounter, "Bytes moved.").ok());
  ASSERT_TRUE(m.Describe("wp_inflight", MetricType::kGauge, "Chunks in flight.").ok());
  ASSERT_TRUE(m.Describe("wp_idle", MetricType::kGauge, "Never set.").ok());
  m.Add("wp_bytes_total", {{"peer", "b"}, {"dir", "in"}}, 12345678901);
  m.Add("wp_bytes_total", {{"peer", "a"}, {"dir", "in"}}, 1);
  m.Add("wp_bytes_total", {{"dir", "in"}, {"peer", "a"}}, 2);  // same series; first order kept
  m.Set("wp_inflight", {}, 0.5);
  m.Add("wp_errors_total", {});  // undescribed: a counter without HELP
  EXPECT_EQ(m.RenderPrometheus(),
            "# HELP wp_bytes_total Bytes moved.\n"
            "# TYPE wp_bytes_total counter\n"
            "wp_bytes_total{peer=\"a\",dir=\"in\"} 3\n"
            "wp_bytes_total{peer=\"b\",dir=\"in\"} 12345678901\n"
            "# TYPE wp_errors_total counter\n"
            "wp_errors_total 1\n"
            "# HELP wp_idle Never set.\n"
            "# TYPE wp_idle gauge\n"
            "# HELP wp_inflight Chunks in flight.\n"
            "# TYPE wp_inflight gauge\n"
            "wp_inflight 0.5\n");
}

TEST(MetricsTest, EscapesLabelValuesAndHelp) {
  Metrics m;
  ASSERT_TRUE(m.Describe("wp_files", MetricType::kGauge, "Path \"quoted\" \\ and\nnewline.").ok());
  m.Set("wp_files", {{"path", "C:\\dir\\\"a\"\nb"}}, 1);
  EXPECT_EQ(m.RenderPrometheus(),
            "# HELP wp_files Path \"quoted\" \\\\ and\\nnewline.\n"
            "# TYPE wp_files gauge\n"
            "wp_files{path=\"C:\\\\dir\\\\\\\"a\\\"\\nb\"} 1\n");
}

TEST(MetricsTest, DescribeTypeConflictIsAnError) {
  Metrics m;
  ASSERT_TRUE(m.Describe("wp_x_total", MetricType::kCounter, "X.").ok());
  EXPECT_TRUE(m.Describe("wp_x_total", MetricType::kCounter, "Other help.").ok());  // no-op
  Status s = m.Describe("wp_x_total", MetricType::kGauge, "X.");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("wp_x_total"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("counter"), std::string::npos) << s.ToString();
  // A gauge created by Set cannot become a counter.
  m.Set("wp_g", {}, 1);
  EXPECT_EQ(m.Describe("wp_g", MetricType::kCounter, "").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Describe("0bad", MetricType::kGauge, "").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.RenderPrometheus(),
            "# TYPE wp_g gauge\nwp_g 1\n# HELP wp_x_total X.\n# TYPE wp_x_total counter\n");
}

TEST(MetricsTest, DescribeFillsInHelpOfAFamilyCreatedByAdd) {
  Metrics m;
  m.Add("wp_y_total", {});
  ASSERT_TRUE(m.Describe("wp_y_total", MetricType::kCounter, "Y.").ok());
  EXPECT_EQ(m.RenderPrometheus(), "# HELP wp_y_total Y.\n# TYPE wp_y_total counter\nwp_y_total 1\n");
}

TEST(MetricsTest, InvalidUpdatesAreDroppedAndCounted) {
  Metrics m;
  m.Add("0bad_total", {});                      // metric name
  m.Add("wp_ok_total", {{"bad-label", "x"}});   // label name
  m.Set("wp_ok", {{"a", "1"}, {"a", "2"}}, 1);  // repeated label name
  m.Add("wp_ok_total", {}, -1);                 // negative counter delta
  m.Add("wp_ok_total", {}, std::nan(""));       // NaN counter delta
  m.Add("wp_ok_total", {}, std::numeric_limits<double>::infinity());
  m.Add("wp_real_total", {});
  m.Set("wp_real_total", {}, 10);  // Set on a counter
  EXPECT_EQ(m.Value(kMetricsInvalidTotal, {}), 7);
  EXPECT_EQ(m.Value("wp_real_total", {}), 1);
  EXPECT_EQ(m.RenderPrometheus(),
            "# HELP weightport_metrics_invalid_total Metric updates dropped for an invalid name, label, "
            "type or value.\n"
            "# TYPE weightport_metrics_invalid_total counter\n"
            "weightport_metrics_invalid_total 7\n"
            "# TYPE wp_real_total counter\n"
            "wp_real_total 1\n");
}

TEST(MetricsTest, ValidatesNames) {
  EXPECT_TRUE(IsValidMetricName("a"));
  EXPECT_TRUE(IsValidMetricName("_a:b_9"));
  EXPECT_TRUE(IsValidMetricName(":a"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_FALSE(IsValidMetricName("9a"));
  EXPECT_FALSE(IsValidMetricName("a-b"));
  EXPECT_FALSE(IsValidMetricName("a b"));
  EXPECT_TRUE(IsValidMetricLabelName("_a9"));
  EXPECT_FALSE(IsValidMetricLabelName("a:b"));
  EXPECT_FALSE(IsValidMetricLabelName("9"));
  EXPECT_FALSE(IsValidMetricLabelName(""));
}

TEST(MetricsTest, FormatsValues) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(-0.0), "0");
  EXPECT_EQ(FormatMetricValue(1), "1");
  EXPECT_EQ(FormatMetricValue(-3), "-3");
  EXPECT_EQ(FormatMetricValue(12345678901), "12345678901");
  EXPECT_EQ(FormatMetricValue(9007199254740993.0), "9007199254740992");  // nearest double to 2^53+1
  EXPECT_EQ(FormatMetricValue(1e20), "100000000000000000000");
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(-2.5), "-2.5");
  EXPECT_EQ(FormatMetricValue(1e300), "1e+300");
  EXPECT_EQ(FormatMetricValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatMetricValue(-std::numeric_limits<double>::infinity()), "-Inf");
  for (double v : {0.1 + 0.2, 1.0 / 3, 1e-9, 123456.789, 5e-324, 1.7976931348623157e308, 1e21 + 1e6}) {
    std::string text = FormatMetricValue(v);
    EXPECT_EQ(std::strtod(text.c_str(), nullptr), v) << text;
  }
}

TEST(MetricsTest, ConcurrentAddsSumExactly) {
  Metrics m;
  constexpr int kThreads = 4;
  constexpr int kAdds = 10000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&m, t] {
      for (int i = 0; i < kAdds; ++i) {
        m.Add("wp_adds_total", {{"kind", "shared"}});
        m.Add("wp_adds_total", {{"kind", "own"}, {"thread", std::to_string(t)}}, 2);
        if (i % 1000 == 0) {
          EXPECT_FALSE(m.RenderPrometheus().empty());  // readers race writers
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(m.Value("wp_adds_total", {{"kind", "shared"}}), kThreads * kAdds);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(m.Value("wp_adds_total", {{"kind", "own"}, {"thread", std::to_string(t)}}), 2 * kAdds);
  }
}

}  // namespace
}  // namespace weightport
