// Timing CSV files: the measured data parses, writing reads back equal, errors name the line; the
// device header lines round-trip and their mistakes are named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/devices.h"
#include "support/problems.h"
#include "ucudnn/core/timing_csv.h"

namespace ucudnn {
namespace {

using ::testing::HasSubstr;

const std::string kHeader =
    "layer,n,c,h,w,k,r,s,pad,stride,dtype,layout,op,micro_batch,algo,time_ms,workspace_bytes\n";

std::string DataPath(const std::string& name) {
  return std::string(UCUDNN_SOURCE_DIR) + "/data/h100/" + name;
}

TEST(TimingCsv, ParsesTheMeasuredH100Tables) {
  for (const char* name :
       {"h100-cudnn91400-resnet50-fp32-nchw.csv", "h100-cudnn91400-resnet50-fp16-nhwc.csv"}) {
    Result<TimingTables> tables = ReadTimingCsvFile(DataPath(name));
    ASSERT_TRUE(tables.ok()) << tables.status().ToString();
    EXPECT_EQ(tables->size(), 69u) << name;  // 23 shapes x 3 ops
    size_t rows = 0;
    for (const auto& [key, timings] : *tables) {
      EXPECT_EQ(key, CanonicalKey(timings.problem));
      EXPECT_EQ(timings.mini_batch, 256);
      EXPECT_EQ(timings.layer.rfind("r50.", 0), 0u) << timings.layer;
      rows += timings.table.entries.size();
      for (const Timing& t : timings.table.entries) {
        EXPECT_GT(t.time_ms, 0.0);
        EXPECT_EQ(t.status, TimingStatus::kOk);
      }
    }
    const bool fp16 = std::string(name).find("fp16") != std::string::npos;
    EXPECT_EQ(rows, fp16 ? 1242u : 2478u);
    const ProblemTimings& any = tables->begin()->second;
    EXPECT_EQ(any.problem.data_type, fp16 ? DataType::kFloat16 : DataType::kFloat32);
    EXPECT_EQ(any.problem.layout, fp16 ? Layout::kNHWC : Layout::kNCHW);
    EXPECT_EQ(any.problem.math, fp16 ? MathMode::kTensorOp : MathMode::kDefault);
    EXPECT_EQ(any.problem.compute_type, DataType::kFloat32);

    Result<std::string> written = WriteTimingCsv(*tables);
    ASSERT_TRUE(written.ok());
    EXPECT_EQ(written->substr(0, kHeader.size()), kHeader);  // same columns as the data
    Result<TimingTables> again = ParseTimingCsv(*written);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *tables);
  }
}

TEST(TimingCsv, FindsTablesByProblem) {
  const std::string text = kHeader +
                           "a,32,64,56,56,64,3,3,1,1,fp32,NCHW,fwd,1,0,0.5,0\n"
                           "a,32,64,56,56,64,3,3,1,1,fp32,NCHW,fwd,2,1,0.75,1024\n"
                           "a,32,64,56,56,64,3,3,1,1,fp32,NCHW,bwd_filter,2,1,0.8,2048\n";
  Result<TimingTables> tables = ParseTimingCsv(text);
  ASSERT_TRUE(tables.ok()) << tables.status().ToString();
  ASSERT_EQ(tables->size(), 2u);
  ConvProblem p = test_support::SquareConv(ConvOp::kForward, 64, 56, 64);
  const TimingTable* fwd = FindTimings(*tables, p);
  ASSERT_NE(fwd, nullptr);
  ASSERT_EQ(fwd->entries.size(), 2u);
  EXPECT_EQ(fwd->entries[1].algo, 1);
  EXPECT_EQ(fwd->entries[1].workspace_bytes, 1024u);
  EXPECT_DOUBLE_EQ(fwd->entries[1].time_ms, 0.75);
  p.op = ConvOp::kBackwardData;
  EXPECT_EQ(FindTimings(*tables, p), nullptr);
}

TEST(TimingCsv, AcceptsCommentsCrlfQuotesAndAnyColumnOrder) {
  const std::string text =
      "# a comment\r\n"
      "\r\n"
      "op,algo,micro_batch,time_ms,workspace_bytes,layer,n,c,h,w,k,r,s,pad,stride,dtype,layout,"
      "extra\r\n"
      "FWD,2,4,1.25,0,\"conv, \"\"odd\"\"\",8,3,32,32,8,3,3,1,1,FP16,nhwc,ignored\r\n";
  Result<TimingTables> tables = ParseTimingCsv(text);
  ASSERT_TRUE(tables.ok()) << tables.status().ToString();
  ASSERT_EQ(tables->size(), 1u);
  const ProblemTimings& t = tables->begin()->second;
  EXPECT_EQ(t.layer, "conv, \"odd\"");
  EXPECT_EQ(t.problem.data_type, DataType::kFloat16);
  EXPECT_EQ(t.problem.math, MathMode::kTensorOp);
  EXPECT_EQ(t.table.entries[0].algo, 2);
}

TEST(TimingCsv, ExtendedColumnsRoundTrip) {
  TimingTables tables;
  ProblemTimings grouped;
  grouped.problem.op = ConvOp::kBackwardData;
  grouped.problem.c = 32;
  grouped.problem.h = 20;
  grouped.problem.w = 30;
  grouped.problem.k = 64;
  grouped.problem.r = 3;
  grouped.problem.s = 1;
  grouped.problem.pad_h = 2;
  grouped.problem.pad_w = 0;
  grouped.problem.stride_w = 2;
  grouped.problem.dilation_h = 2;
  grouped.problem.groups = 4;
  grouped.problem.data_type = DataType::kBFloat16;
  grouped.problem.math = MathMode::kTensorOpAllowConversion;
  grouped.layer = "#grouped";  // a leading '#' must not read as a comment
  grouped.mini_batch = 16;
  Timing ok;
  ok.micro_batch = 16;
  ok.algo = 1;
  ok.time_ms = 0.1 + 0.2;  // not exactly representable in short decimal
  ok.spread_ms = 0.01;
  ok.samples = 7;
  ok.workspace_bytes = 123456789;
  Timing failed;
  failed.micro_batch = 8;
  failed.algo = 3;
  failed.status = TimingStatus::kFailed;
  failed.error = "CUDNN_STATUS_BAD_PARAM, \"quoted\"";
  grouped.table.entries = {ok, failed};
  tables[CanonicalKey(grouped.problem)] = grouped;

  Result<std::string> text = WriteTimingCsv(tables);
  ASSERT_TRUE(text.ok());
  EXPECT_THAT(*text, HasSubstr("pad_w,stride_w,dilation_h,dilation_w,groups,ctype,math,status"));
  Result<TimingTables> back = ParseTimingCsv(*text);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << *text;
  EXPECT_EQ(*back, tables);

  ProblemTimings broken = grouped;
  broken.problem.c = 0;
  TimingTables bad;
  bad["x"] = broken;
  EXPECT_EQ(WriteTimingCsv(bad).status().code(), StatusCode::kInvalidArgument);
}

// The algo column takes an engine configuration's key as well as a legacy number; files with
// both read back equal, and an engine key that is not canonical is refused with its line.
TEST(TimingCsv, EngineConfigurationsShareTheAlgoColumn) {
  const std::string text = kHeader +
                           "a,32,64,56,56,64,3,3,1,1,fp32,NCHW,fwd,32,1,0.75,4096\n"
                           "a,32,64,56,56,64,3,3,1,1,fp32,NCHW,fwd,32,eng34{k3=2;k14=-1},0.5,8192\n"
                           "a,32,64,56,56,64,3,3,1,1,fp32,NCHW,fwd,32,eng34,0.625,0\n"
                           "a,32,64,56,56,64,3,3,1,1,fp32,NCHW,fwd,16,eng34,0.375,0\n";
  Result<TimingTables> tables = ParseTimingCsv(text);
  ASSERT_TRUE(tables.ok()) << tables.status().ToString();
  ASSERT_EQ(tables->size(), 1u);
  const std::vector<Timing>& entries = tables->begin()->second.table.entries;
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[0].algo, 1);
  EXPECT_EQ(entries[0].engine_config, "");
  EXPECT_EQ(entries[1].algo, kEngineAlgo);
  EXPECT_EQ(entries[1].engine_config, "eng34{k3=2;k14=-1}");
  EXPECT_EQ(entries[1].time_ms, 0.5);
  EXPECT_EQ(entries[1].workspace_bytes, 8192u);
  EXPECT_EQ(entries[2].engine_config, "eng34");
  EXPECT_EQ(entries[3].micro_batch, 16);

  Result<std::string> written = WriteTimingCsv(*tables);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_THAT(*written, HasSubstr(",32,eng34{k3=2;k14=-1},0.5,8192"));
  EXPECT_THAT(*written, HasSubstr(kHeader));  // no new column: older readers see their format
  Result<TimingTables> back = ParseTimingCsv(*written);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << *written;
  EXPECT_EQ(*back, *tables);

  auto error = [](const std::string& body) {
    Result<TimingTables> r = ParseTimingCsv(kHeader + body);
    EXPECT_FALSE(r.ok()) << body;
    return r.status().message();
  };
  EXPECT_THAT(error("a,32,64,56,56,64,3,3,1,1,fp32,NCHW,fwd,1,eng34{k14=1;k3=2},1,0\n"),
              HasSubstr("line 2: algo: engine configuration 'eng34{k14=1;k3=2}': not in "
                        "canonical order"));
  EXPECT_THAT(error("a,32,64,56,56,64,3,3,1,1,fp32,NCHW,fwd,1,engine,1,0\n"),
              HasSubstr("line 2: algo: engine configuration 'engine': bad engine index"));
  EXPECT_THAT(error("a,32,64,56,56,64,3,3,1,1,fp32,NCHW,fwd,1,eng3,1,0\n"
                    "b,32,64,56,56,64,3,3,1,1,fp32,NCHW,fwd,1,eng3,2,0\n"),
              HasSubstr("line 3: micro_batch 1, algo eng3: repeated"));

  // A table that breaks the identity rule is not written.
  TimingTables bad = *tables;
  bad.begin()->second.table.entries[1].algo = 4;
  EXPECT_EQ(WriteTimingCsv(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST(TimingCsv, ErrorsNameTheLineAndColumn) {
  auto error = [](const std::string& text) {
    Result<TimingTables> r = ParseTimingCsv(text);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    return r.status().message();
  };
  EXPECT_THAT(error(""), HasSubstr("no header"));
  EXPECT_THAT(error("layer,n,c\n"), HasSubstr("missing column 'h'"));
  EXPECT_THAT(error(kHeader + "a,32,64,56,56,64,3,3,1,1,fp32,NCHW,fwd,1,0,fast,0\n"),
              HasSubstr("line 2: time_ms"));
  EXPECT_THAT(error(kHeader + "a,32,64,56,56,64,3,3,1,1,fp32,NCHW,fwd,1,0,-1,0\n"),
              HasSubstr("non-negative"));
  EXPECT_THAT(error(kHeader + "a,32,64,56,56,64,3,3,1,1,fp32,NCHW,sideways,1,0,1,0\n"),
              HasSubstr("line 2"));
  EXPECT_THAT(error(kHeader + "a,32,0,56,56,64,3,3,1,1,fp32,NCHW,fwd,1,0,1,0\n"),
              HasSubstr("line 2: c"));
  EXPECT_THAT(error(kHeader + "a,32,64,56,56,64,3,3,1,1,fp32,NCHW,fwd,0,0,1,0\n"),
              HasSubstr("micro_batch"));
  EXPECT_THAT(error(kHeader + "a,32,64,56,56,64,3,3,1,1,fp32,NCHW,fwd,1,0,1\n"),
              HasSubstr("expected 17 fields"));
  EXPECT_THAT(error(kHeader + "a,32,64,56,56,64,3,3,1,1,fp32,NCHW,fwd,1,0,1,0\n"
                              "b,32,64,56,56,64,3,3,1,1,fp32,NCHW,fwd,1,0,2,0\n"),
              HasSubstr("line 3: micro_batch 1, algo 0: repeated"));
  EXPECT_THAT(error(kHeader + "\"a,32\n"), HasSubstr("unterminated"));
  Result<TimingTables> missing = ReadTimingCsvFile("/nonexistent/timings.csv");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/timings.csv"));
}

TEST(DeviceHeaderTest, RoundTripsGpuAndCpuFingerprints) {
  for (const DeviceFingerprint& d : {test_support::H100(), CpuFingerprint()}) {
    const std::string text =
        DeviceHeader(d, {"network: resnet50"}) + "layer,n,c\n# not a device line\n";
    auto parsed = ParseDeviceHeader(text);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(*parsed, d);
    EXPECT_EQ(parsed->Hash(), d.Hash());
  }
}

TEST(DeviceHeaderTest, RejectsMissingContradictoryAndMalformedHeaders) {
  EXPECT_EQ(ParseDeviceHeader("layer,n\n1,2\n").status().code(), StatusCode::kNotFound);

  const std::string good = DeviceHeader(test_support::H100(), {});
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  struct Case {
    std::string text;
    std::string field;
  };
  const std::vector<Case> cases = {
      {replace("# device.sm_count: 132", "# device.sm_count: many"), "device.sm_count"},
      {replace("# device.cc: 9.0", "# device.cc: 9"), "device.cc"},
      {replace("# device.cudnn_version: 91400\n", ""), "device.cudnn_version"},
      {replace("# device.name: NVIDIA H100", "# device.name: NVIDIA A100"), "device.key"},
      {replace("# device.backend: cudnn", "# device.backend: tpu"), "backend"},
      {good + "# device.name: twice\n", "device.name"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseDeviceHeader(c.text);
    ASSERT_FALSE(parsed.ok()) << c.field;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.field));
  }
}

}  // namespace
}  // namespace ucudnn
