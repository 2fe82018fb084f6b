#include "curve.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "ucudnn/core/units.h"

namespace ucudnn::cli {
namespace {

constexpr uint64_t kSmallestLimit = 64 << 10;

std::string Number(double value, const char* format = "%.1f") {
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

// The characters SVG text may not hold raw.
std::string EscapeXml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

std::vector<uint64_t> CurveLimits(uint64_t max_bytes) {
  std::vector<uint64_t> limits = {0};
  for (uint64_t limit = kSmallestLimit; limit <= max_bytes && limit != 0; limit <<= 1) {
    limits.push_back(limit);
  }
  if (max_bytes > 0 && limits.back() != max_bytes) limits.push_back(max_bytes);
  return limits;
}

std::string FormatCurveTable(const std::vector<CurvePoint>& points) {
  std::string out = "workspace limit     predicted ms   undivided ms   speedup   planned\n";
  char line[160];
  for (const CurvePoint& p : points) {
    const std::string speedup = p.undivided_ms > 0 && p.predicted_ms > 0
                                    ? Number(p.undivided_ms / p.predicted_ms, "%.2fx")
                                    : "n/a";
    const std::string undivided = p.undivided_ms > 0 ? Number(p.undivided_ms, "%.3f") : "n/a";
    std::snprintf(line, sizeof(line), "%15s %16.3f %14s %9s   %d/%d%s\n",
                  FormatBytes(p.workspace_bytes).c_str(), p.predicted_ms, undivided.c_str(),
                  speedup.c_str(), p.planned_kernels, p.kernels,
                  p.planned_kernels < p.kernels ? " (incomplete)" : "");
    out += line;
  }
  return out;
}

std::string FormatCurveSvg(const std::vector<CurvePoint>& points, const std::string& title) {
  constexpr double kWidth = 720, kHeight = 420, kLeft = 70, kRight = 20, kTop = 40, kBottom = 60;
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  // x: log2 of the limit; the limit 0 sits one step left of the smallest positive one.
  double lo = 0, hi = 1;
  bool first = true;
  for (const CurvePoint& p : points) {
    if (p.workspace_bytes == 0) continue;
    const double x = std::log2(static_cast<double>(p.workspace_bytes));
    lo = first ? x : std::min(lo, x);
    hi = first ? x : std::max(hi, x);
    first = false;
  }
  lo -= 1;
  if (hi <= lo) hi = lo + 1;
  double max_ms = 0;
  for (const CurvePoint& p : points) max_ms = std::max({max_ms, p.predicted_ms, p.undivided_ms});
  if (max_ms <= 0) max_ms = 1;
  const auto px = [&](uint64_t bytes) {
    const double x = bytes == 0 ? lo : std::log2(static_cast<double>(bytes));
    return kLeft + (x - lo) / (hi - lo) * plot_w;
  };
  const auto py = [&](double ms) { return kTop + plot_h - ms / (max_ms * 1.05) * plot_h; };

  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Number(kWidth, "%.0f") +
                    "\" height=\"" + Number(kHeight, "%.0f") + "\" font-family=\"sans-serif\" " +
                    "font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + Number(kWidth / 2, "%.0f") + "\" y=\"22\" text-anchor=\"middle\" " +
         "font-size=\"15\">" + EscapeXml(title) + "</text>\n";
  // Axes, ticks at every point's limit, and five time ticks.
  svg += "<line x1=\"" + Number(kLeft) + "\" y1=\"" + Number(kTop + plot_h) + "\" x2=\"" +
         Number(kLeft + plot_w) + "\" y2=\"" + Number(kTop + plot_h) + "\" stroke=\"black\"/>\n";
  svg += "<line x1=\"" + Number(kLeft) + "\" y1=\"" + Number(kTop) + "\" x2=\"" + Number(kLeft) +
         "\" y2=\"" + Number(kTop + plot_h) + "\" stroke=\"black\"/>\n";
  const size_t label_step = points.size() > 12 ? 2 : 1;  // every other label when crowded
  for (size_t i = 0; i < points.size(); i += label_step) {
    const double x = px(points[i].workspace_bytes);
    svg += "<text x=\"" + Number(x) + "\" y=\"" + Number(kTop + plot_h + 16) +
           "\" text-anchor=\"middle\" font-size=\"10\">" +
           EscapeXml(FormatBytes(points[i].workspace_bytes)) + "</text>\n";
  }
  for (int i = 0; i <= 5; ++i) {
    const double ms = max_ms * 1.05 * i / 5;
    svg += "<text x=\"" + Number(kLeft - 6) + "\" y=\"" + Number(py(ms) + 4) +
           "\" text-anchor=\"end\" font-size=\"10\">" + Number(ms, "%.3g") + "</text>\n";
  }
  svg += "<text x=\"" + Number(kLeft + plot_w / 2) + "\" y=\"" + Number(kHeight - 18) +
         "\" text-anchor=\"middle\">workspace limit (log scale)</text>\n";
  svg += "<text x=\"16\" y=\"" + Number(kTop + plot_h / 2) + "\" text-anchor=\"middle\" " +
         "transform=\"rotate(-90 16 " + Number(kTop + plot_h / 2) + ")\">predicted ms</text>\n";
  // The undivided baseline (where known), then the plan's curve on top.
  std::string baseline, predicted;
  for (const CurvePoint& p : points) {
    if (p.undivided_ms > 0) {
      baseline += Number(px(p.workspace_bytes)) + "," + Number(py(p.undivided_ms)) + " ";
    }
    predicted += Number(px(p.workspace_bytes)) + "," + Number(py(p.predicted_ms)) + " ";
  }
  if (!baseline.empty()) {
    svg += "<polyline fill=\"none\" stroke=\"#999\" stroke-dasharray=\"4 3\" points=\"" + baseline +
           "\"/>\n";
  }
  svg += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"" + predicted +
         "\"/>\n";
  for (const CurvePoint& p : points) {
    const bool complete = p.planned_kernels >= p.kernels;
    svg += "<circle cx=\"" + Number(px(p.workspace_bytes)) + "\" cy=\"" +
           Number(py(p.predicted_ms)) + "\" r=\"3.5\" stroke=\"#1f77b4\" fill=\"" +
           (complete ? "#1f77b4" : "white") + "\"/>\n";
  }
  svg += "<text x=\"" + Number(kLeft + plot_w - 4) + "\" y=\"" + Number(kTop + 12) +
         "\" text-anchor=\"end\" font-size=\"11\">solid: ucudnn plan; dashed: cuDNN alone; "
         "hollow: incomplete plan</text>\n";
  svg += "</svg>\n";
  return svg;
}

}  // namespace ucudnn::cli
