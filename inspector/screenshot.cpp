// PNG output through Debian's libstb (stb_image_write, compiled into libstb.so).
#include "screenshot.hpp"

#include <stb_image_write.h>

namespace inspector {

std::string write_png(const std::string& path, const Capture& capture) {
  if (capture.width <= 0 || capture.height <= 0 ||
      capture.rgba.size() < size_t(capture.width) * capture.height * 4)
    return "no frame was captured";
  // Best compression: the README keeps the screenshot, and flat UI colours compress well.
  stbi_write_png_compression_level = 9;
  if (!stbi_write_png(path.c_str(), capture.width, capture.height, 4, capture.rgba.data(),
                      capture.width * 4))
    return "cannot write " + path;
  return "";
}

}  // namespace inspector
