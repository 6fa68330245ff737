#pragma once
#include <string>

#include "vk_window.hpp"

namespace inspector {

// Writes the captured frame as a PNG; returns an error message, empty on success.
std::string write_png(const std::string& path, const Capture& capture);

}  // namespace inspector
