// `ucudnn curve`'s limits, table and picture (cli/src/curve.h).
#include "curve.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>

namespace ucudnn::cli {
namespace {

using ::testing::HasSubstr;

TEST(CurveTest, LimitsStartAtZeroAndDoubleUpToTheMaximum) {
  EXPECT_EQ(CurveLimits(1 << 20),
            (std::vector<uint64_t>{0, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20}));
  EXPECT_EQ(CurveLimits(3 << 20).back(), 3u << 20);  // the maximum itself closes the curve
  EXPECT_EQ(CurveLimits(0), (std::vector<uint64_t>{0}));
  EXPECT_EQ(CurveLimits(1000), (std::vector<uint64_t>{0, 1000}));
}

std::vector<CurvePoint> Points() {
  return {{0, 80.0, 80.0, 3, 3}, {1 << 20, 40.0, 60.0, 3, 3}, {4 << 20, 20.0, 50.0, 2, 3}};
}

TEST(CurveTest, TableHasALinePerLimitWithTheSpeedup) {
  const std::string table = FormatCurveTable(Points());
  EXPECT_THAT(table, HasSubstr("workspace limit"));
  EXPECT_THAT(table, ::testing::ContainsRegex("0 B +80\\.000 +80\\.000 +1\\.00x +3/3"));
  EXPECT_THAT(table, ::testing::ContainsRegex("1 MiB +40\\.000 +60\\.000 +1\\.50x +3/3"));
  EXPECT_THAT(table,
              ::testing::ContainsRegex("4 MiB +20\\.000 +50\\.000 +2\\.50x +2/3 \\(incomplete\\)"));
}

TEST(CurveTest, SvgDrawsEveryPointFallingWithTheLimit) {
  const std::string svg = FormatCurveSvg(Points(), "net <b> & co");
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_THAT(svg, HasSubstr("</svg>"));
  EXPECT_THAT(svg, HasSubstr("net &lt;b&gt; &amp; co"));  // escaped
  // The plan's polyline: one x,y per point, x growing with the limit, y (downwards) growing as
  // the predicted time falls.
  std::smatch match;
  const std::regex polyline("stroke=\"#1f77b4\" stroke-width=\"2\" points=\"([^\"]*)\"");
  ASSERT_TRUE(std::regex_search(svg, match, polyline)) << svg;
  std::vector<std::pair<double, double>> xy;
  const std::string coordinates = match[1].str();
  const std::regex pair("([0-9.]+),([0-9.]+)");
  for (auto it = std::sregex_iterator(coordinates.begin(), coordinates.end(), pair);
       it != std::sregex_iterator(); ++it) {
    xy.emplace_back(std::stod((*it)[1].str()), std::stod((*it)[2].str()));
  }
  ASSERT_EQ(xy.size(), 3u);
  EXPECT_LT(xy[0].first, xy[1].first);
  EXPECT_LT(xy[1].first, xy[2].first);
  EXPECT_LT(xy[0].second, xy[1].second);
  EXPECT_LT(xy[1].second, xy[2].second);
  // The incomplete point is hollow.
  EXPECT_THAT(svg, HasSubstr("fill=\"white\"/>"));
}

}  // namespace
}  // namespace ucudnn::cli
