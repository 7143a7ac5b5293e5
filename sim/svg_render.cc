#include "sim/svg_render.h"

#include <cairo-pdf.h>
#include <cairo.h>
#include <librsvg/rsvg.h>

#include <cctype>
#include <cstdio>
#include <memory>
#include <stdexcept>

namespace pipescope::sim {
namespace {

cairo_status_t append(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

void check(cairo_status_t st, const char* what) {
  if (st != CAIRO_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": " + cairo_status_to_string(st));
}

std::string take_error(GError* e) {
  const std::string msg = e ? e->message : "unknown error";
  if (e) g_error_free(e);
  return msg;
}

// cairo's image surfaces stop at 32767 pixels a side; past that it fails with "invalid value".
void check_png_size(double w, double h) {
  constexpr double kMaxSide = 32767;
  if (w + 0.5 < kMaxSide + 1 && h + 0.5 < kMaxSide + 1) return;
  char b[160];
  std::snprintf(b, sizeof b, "the timeline is %.0f x %.0f pixels, over PNG's limit of %.0f a side", w, h, kMaxSide);
  throw std::invalid_argument(std::string(b) + " (cairo); write SVG or PDF, or lower --timeline-width");
}

}  // namespace

ImageFormat image_format_from_name(const std::string& name, const std::string& flag) {
  if (name == "svg") return ImageFormat::Svg;
  if (name == "pdf") return ImageFormat::Pdf;
  if (name == "png") return ImageFormat::Png;
  throw std::invalid_argument(flag + ": unknown format '" + name + "' (svg, pdf, png)");
}

ImageFormat image_format_from_path(const std::string& path) {
  const auto dot = path.find_last_of('.');
  std::string ext = dot == std::string::npos ? "" : path.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext == "pdf") return ImageFormat::Pdf;
  if (ext == "png") return ImageFormat::Png;
  return ImageFormat::Svg;
}

std::string render_svg(const std::string& svg, ImageFormat format) {
  switch (format) {
    case ImageFormat::Svg:
      return svg;
    case ImageFormat::Pdf:
    case ImageFormat::Png:
      break;
  }
  GError* err = nullptr;
  std::unique_ptr<RsvgHandle, void (*)(gpointer)> h(
      rsvg_handle_new_from_data(reinterpret_cast<const guint8*>(svg.data()), svg.size(), &err), g_object_unref);
  if (!h) throw std::runtime_error("rendering the timeline: " + take_error(err));
  double w = 0, ht = 0;
  if (!rsvg_handle_get_intrinsic_size_in_pixels(h.get(), &w, &ht) || w <= 0 || ht <= 0)
    throw std::runtime_error("rendering the timeline: the SVG has no width and height");
  if (format == ImageFormat::Png) check_png_size(w, ht);
  std::string out;
  std::unique_ptr<cairo_surface_t, void (*)(cairo_surface_t*)> surface(
      format == ImageFormat::Pdf
          ? cairo_pdf_surface_create_for_stream(append, &out, w, ht)
          : cairo_image_surface_create(CAIRO_FORMAT_ARGB32, static_cast<int>(w + 0.5), static_cast<int>(ht + 0.5)),
      cairo_surface_destroy);
  check(cairo_surface_status(surface.get()), "cairo surface");
  if (format == ImageFormat::Pdf) {
    // Fixed dates: the same timeline gives the same bytes.
    cairo_pdf_surface_set_metadata(surface.get(), CAIRO_PDF_METADATA_CREATE_DATE, "2000-01-01T00:00:00Z");
    cairo_pdf_surface_set_metadata(surface.get(), CAIRO_PDF_METADATA_MOD_DATE, "2000-01-01T00:00:00Z");
    cairo_pdf_surface_set_metadata(surface.get(), CAIRO_PDF_METADATA_CREATOR, "pipescope");
  }
  std::unique_ptr<cairo_t, void (*)(cairo_t*)> cr(cairo_create(surface.get()), cairo_destroy);
  const RsvgRectangle viewport{0, 0, w, ht};
  if (!rsvg_handle_render_document(h.get(), cr.get(), &viewport, &err))
    throw std::runtime_error("rendering the timeline: " + take_error(err));
  check(cairo_status(cr.get()), "cairo");
  cr.reset();
  if (format == ImageFormat::Png)
    check(cairo_surface_write_to_png_stream(surface.get(), append, &out), "writing PNG");
  else
    cairo_surface_finish(surface.get());
  check(cairo_surface_status(surface.get()), "writing PDF");
  return out;
}

}  // namespace pipescope::sim
