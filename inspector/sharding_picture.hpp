#pragma once
// The picture visualize_array_sharding prints, as a grid of character cells the arrays view can
// draw: meshvk::visualize_sharding is asked for its coloured text and the ANSI colours are read
// back, so the window shows exactly the terminal's geometry, tab20b colours and labels. Each
// coloured region becomes a tile that knows the devices and index ranges it stands for.
#include <cstdint>
#include <string>
#include <vector>

#include <meshvk/meshvk.hpp>

namespace inspector {

struct PictureCell {
  uint32_t ch = ' ';  // a Unicode code point
  uint32_t fg = 0;    // 0xRRGGBB
  uint32_t bg = 0;    // 0xRRGGBB, when has_bg
  bool has_bg = false;
  int tile = -1;  // index into ShardingPicture::tiles; -1 outside every tile
};

struct PictureTile {
  int line0 = 0, col0 = 0, line1 = 0, col1 = 0;  // cell rectangle, half-open
  uint32_t rgb = 0;
  std::string label;         // "CPU 0,4"
  std::vector<int> devices;  // every device holding this piece
  meshvk::Index index;       // the piece, in global coordinates (all dimensions)
  uint64_t bytes = 0;        // of one copy of the piece
};

struct ShardingPicture {
  std::vector<std::vector<PictureCell>> lines;
  int columns = 0;
  std::vector<PictureTile> tiles;
  std::string error;  // what went wrong; the picture is empty then
};

ShardingPicture make_sharding_picture(const meshvk::Shape& shape, const meshvk::Sharding& sharding,
                                      meshvk::DType dtype,
                                      const meshvk::VisualizeOptions& options = {});

// Parses text with 24-bit ANSI colours ("\x1b[38;2;r;g;b;48;2;r;g;bm") into cells; exposed for
// the tests.
std::vector<std::vector<PictureCell>> parse_ansi(const std::string& text);

}  // namespace inspector
