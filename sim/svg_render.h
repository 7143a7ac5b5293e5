#pragma once
// Timelines as PDF or PNG: the SVG that sim/timeline_svg.h writes, rendered by librsvg onto a cairo surface
// (Debian librsvg2 + cairo), so a figure goes into a paper without another tool. Deterministic: the PDF's
// creation and modification dates are fixed, PNG has none.

#include <cstdint>
#include <string>

namespace pipescope::sim {

enum class ImageFormat : std::uint8_t { Svg, Pdf, Png };

// "svg" | "pdf" | "png"; throws std::invalid_argument naming `flag` otherwise.
ImageFormat image_format_from_name(const std::string& name, const std::string& flag);
// From the file name's extension (.svg, .pdf, .png; anything else: SVG).
ImageFormat image_format_from_path(const std::string& path);

// `svg` in `format` (SVG: unchanged). Throws std::runtime_error with librsvg's or cairo's message.
std::string render_svg(const std::string& svg, ImageFormat format);

}  // namespace pipescope::sim
