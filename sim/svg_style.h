#pragma once
// The drawing conventions the SVG pictures share (sim/timeline_svg.h's timelines, sim/chart_svg.h's charts): one
// palette, fixed number formatting (identical inputs give identical bytes), axis ticks, a text-width estimate for
// layout. Inline: small, header-only.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace pipescope::sim::svg {

// Qualitative palette (Tableau 10 with a navy instead of grey, which the optimizer and idle band use).
inline constexpr const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                           "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#2f4b7c"};
inline constexpr int kColours = sizeof kPalette / sizeof kPalette[0];

struct Rgb {
  double r, g, b;
};

inline Rgb parse_hex(const char* h) {
  unsigned v = 0;
  std::sscanf(h + 1, "%x", &v);
  return {((v >> 16) & 255) / 255.0, ((v >> 8) & 255) / 255.0, (v & 255) / 255.0};
}

inline std::string hex(const Rgb& c) {
  auto ch = [](double x) { return static_cast<unsigned>(std::lround(std::clamp(x, 0.0, 1.0) * 255)); };
  char b[8];
  std::snprintf(b, sizeof b, "#%02x%02x%02x", ch(c.r), ch(c.g), ch(c.b));
  return b;
}

inline Rgb mix(const Rgb& a, const Rgb& b, double t) {
  return {a.r + (b.r - a.r) * t, a.g + (b.g - a.g) * t, a.b + (b.b - a.b) * t};
}

inline double luminance(const Rgb& c) { return 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b; }

// Fixed two-decimal formatting; "-0.00" never appears.
inline std::string f2(double x) {
  char b[48];
  std::snprintf(b, sizeof b, "%.2f", std::abs(x) < 0.005 ? 0.0 : x);
  return b;
}
inline double round2(double x) { return std::round(x * 100.0) / 100.0; }

struct Unit {
  const char* name;
  double factor;
};
inline Unit unit_for(double end_s) {
  if (end_s >= 1.0) return {"s", 1.0};
  if (end_s >= 1e-3) return {"ms", 1e3};
  return {"us", 1e6};
}

// 1, 2 or 5 times a power of ten, giving about `target` intervals over [0, end].
inline double nice_step(double end, double target) {
  const double raw = end / std::max(1.0, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  return (norm <= 1.0 ? 1.0 : norm <= 2.0 ? 2.0 : norm <= 5.0 ? 5.0 : 10.0) * mag;
}

inline std::string tick_text(double v, double step) {
  const int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  char b[48];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

inline double text_width(const std::string& s, double font_px) {
  return static_cast<double>(s.size()) * font_px * 0.62;
}

// A smaller inline font size (a style: the stylesheet's class rule would win over an attribute) when `text` at
// `font_px` would run past `room` px (titles never clip); "" if it fits.
inline std::string fit_font(const std::string& text, double font_px, double room) {
  const double w = text_width(text, font_px);
  if (w <= room || w <= 0) return "";
  return " style=\"font-size:" + f2(std::max(6.0, font_px * room / w)) + "px\"";
}

}  // namespace pipescope::sim::svg
