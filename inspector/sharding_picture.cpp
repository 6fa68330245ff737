#include "sharding_picture.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace inspector {
namespace {

// Applies one SGR sequence's parameters ("38;2;255;255;255;48;2;57;59;121", "0", "") to the pen.
void apply_sgr(const std::string& params, uint32_t& fg, uint32_t& bg, bool& has_bg) {
  std::vector<int> p;
  int value = 0;
  bool any = false;
  for (const char c : params + ";") {
    if (c >= '0' && c <= '9') {
      value = std::min(value * 10 + (c - '0'), 1 << 20);
      any = true;
    } else {
      p.push_back(any ? value : 0);
      value = 0;
      any = false;
    }
  }
  for (size_t i = 0; i < p.size(); ++i) {
    const auto rgb = [&](size_t at) -> uint32_t {
      if (at + 2 >= p.size()) return 0;
      return (std::clamp(p[at], 0, 255) << 16) | (std::clamp(p[at + 1], 0, 255) << 8) |
             std::clamp(p[at + 2], 0, 255);
    };
    if (p[i] == 0) {
      fg = 0xFFFFFF;
      bg = 0;
      has_bg = false;
    } else if ((p[i] == 38 || p[i] == 48) && i + 4 < p.size() && p[i + 1] == 2) {
      const uint32_t c = rgb(i + 2);
      if (p[i] == 38) {
        fg = c;
      } else {
        bg = c;
        has_bg = true;
      }
      i += 4;
    } else if (p[i] == 49) {
      has_bg = false;
    } else if (p[i] == 39) {
      fg = 0xFFFFFF;
    }
  }
}

// The next UTF-8 code point of `s` at `i`, advancing i; U+FFFD for a malformed byte.
uint32_t next_code_point(const std::string& s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i++]);
  if (b < 0x80) return b;
  int extra = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : b >= 0xC0 ? 1 : -1;
  if (extra < 0) return 0xFFFD;
  uint32_t cp = b & (0x3F >> extra);
  for (int k = 0; k < extra; ++k) {
    if (i >= s.size() || (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) return 0xFFFD;
    cp = (cp << 6) | (static_cast<unsigned char>(s[i++]) & 0x3F);
  }
  return cp;
}

std::vector<int> numbers_in(const std::string& label) {
  std::vector<int> out;
  int value = -1;
  for (const char c : label + " ") {
    if (c >= '0' && c <= '9') {
      value = (value < 0 ? 0 : value) * 10 + (c - '0');
    } else if (value >= 0) {
      out.push_back(value);
      value = -1;
    }
  }
  return out;
}

}  // namespace

std::vector<std::vector<PictureCell>> parse_ansi(const std::string& text) {
  std::vector<std::vector<PictureCell>> lines(1);
  uint32_t fg = 0xFFFFFF, bg = 0;
  bool has_bg = false;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '\x1b' && i + 1 < text.size() && text[i + 1] == '[') {
      const size_t end = text.find('m', i + 2);
      if (end == std::string::npos) break;
      apply_sgr(text.substr(i + 2, end - i - 2), fg, bg, has_bg);
      i = end + 1;
      continue;
    }
    if (text[i] == '\n') {
      lines.emplace_back();
      ++i;
      continue;
    }
    PictureCell cell;
    cell.ch = next_code_point(text, i);
    cell.fg = fg;
    cell.bg = bg;
    cell.has_bg = has_bg;
    lines.back().push_back(cell);
  }
  if (lines.back().empty()) lines.pop_back();
  return lines;
}

ShardingPicture make_sharding_picture(const meshvk::Shape& shape, const meshvk::Sharding& sharding,
                                      meshvk::DType dtype,
                                      const meshvk::VisualizeOptions& options) {
  ShardingPicture pic;
  std::vector<meshvk::DeviceIndex> map;
  try {
    meshvk::VisualizeOptions o = options;
    o.use_color = true;
    pic.lines = parse_ansi(meshvk::visualize_sharding(shape, sharding, o));
    map = sharding.devices_indices_map(shape);
  } catch (const std::exception& e) {
    pic = {};
    pic.error = e.what();
    return pic;
  }
  for (const auto& line : pic.lines)
    pic.columns = std::max(pic.columns, static_cast<int>(line.size()));

  // Rank 3+ draws one picture per distinct leading slice, in the order of their starts; the
  // k-th header line ("[0:2, :, :]") opens the k-th picture.
  const size_t lead = shape.size() > 2 ? shape.size() - 2 : 0;
  std::map<std::vector<int64_t>, std::vector<const meshvk::DeviceIndex*>> groups;
  for (const auto& entry : map) {
    std::vector<int64_t> key;
    for (size_t d = 0; d < lead; ++d) key.push_back(entry.index[d].start);
    groups[key].push_back(&entry);
  }
  std::vector<std::vector<const meshvk::DeviceIndex*>> pictures;
  for (auto& [key, entries] : groups) pictures.push_back(std::move(entries));
  std::vector<int> picture_of_line(pic.lines.size(), 0);
  int picture = lead > 0 ? -1 : 0;
  for (size_t l = 0; l < pic.lines.size(); ++l) {
    const auto& line = pic.lines[l];
    if (lead > 0 && !line.empty() && line.front().ch == '[' && !line.front().has_bg) ++picture;
    picture_of_line[l] = std::max(picture, 0);
  }

  // Tiles: 4-connected regions of one background colour. Neighbouring pieces get far-apart
  // colours from JAX's colour walk, so a region is one piece.
  for (size_t l0 = 0; l0 < pic.lines.size(); ++l0) {
    for (size_t c0 = 0; c0 < pic.lines[l0].size(); ++c0) {
      PictureCell& seed = pic.lines[l0][c0];
      if (!seed.has_bg || seed.tile >= 0) continue;
      PictureTile tile;
      tile.rgb = seed.bg;
      tile.line0 = tile.line1 = static_cast<int>(l0);
      tile.col0 = tile.col1 = static_cast<int>(c0);
      const int id = static_cast<int>(pic.tiles.size());
      std::vector<std::pair<size_t, size_t>> stack = {{l0, c0}};
      seed.tile = id;
      std::vector<std::pair<size_t, size_t>> cells;
      while (!stack.empty()) {
        const auto [l, c] = stack.back();
        stack.pop_back();
        cells.emplace_back(l, c);
        tile.line0 = std::min(tile.line0, static_cast<int>(l));
        tile.line1 = std::max(tile.line1, static_cast<int>(l));
        tile.col0 = std::min(tile.col0, static_cast<int>(c));
        tile.col1 = std::max(tile.col1, static_cast<int>(c));
        const auto visit = [&](size_t nl, size_t nc) {
          if (nl >= pic.lines.size() || nc >= pic.lines[nl].size()) return;
          PictureCell& n = pic.lines[nl][nc];
          if (n.has_bg && n.tile < 0 && n.bg == tile.rgb) {
            n.tile = id;
            stack.emplace_back(nl, nc);
          }
        };
        visit(l + 1, c);
        visit(l - 1, c);
        visit(l, c + 1);
        visit(l, c - 1);
      }
      tile.line1 += 1;
      tile.col1 += 1;
      std::sort(cells.begin(), cells.end());
      std::string label;
      for (const auto& [l, c] : cells) {
        const uint32_t ch = pic.lines[l][c].ch;
        if (ch == ' ' && !label.empty() && label.back() != ' ')
          label += ' ';
        else if (ch > ' ' && ch < 0x80)
          label += static_cast<char>(ch);
      }
      while (!label.empty() && label.back() == ' ') label.pop_back();
      tile.label = label;
      tile.devices = numbers_in(label);
      // The piece: the entry of this tile's picture held by the tile's first device.
      const int p = picture_of_line[l0];
      if (!tile.devices.empty() && p < static_cast<int>(pictures.size())) {
        for (const auto* entry : pictures[p]) {
          if (entry->device != tile.devices.front()) continue;
          tile.index = entry->index;
          uint64_t elements = 1;
          for (const auto& s : entry->index)
            elements *= static_cast<uint64_t>(std::max<int64_t>(s.size(), 0));
          tile.bytes = elements * meshvk::dtype_size(dtype);
          break;
        }
      }
      pic.tiles.push_back(std::move(tile));
    }
  }
  return pic;
}

}  // namespace inspector
