#include "sharding_picture.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>
#include <map>
#include <set>

namespace inspector {
namespace {

// matplotlib's tab20b as JAX converts it (int(x * 255)): the same table as the engine's
// visualize.cpp, which prints these colours in the terminal.
constexpr std::array<uint32_t, 20> kTab20b = {0x393B79, 0x5254A3, 0x6B6ECF, 0x9C9EDE, 0x637939,
                                              0x8CA252, 0xB5CF6B, 0xCEDB9C, 0x8C6D31, 0xBD9E39,
                                              0xE7BA52, 0xE7CB94, 0x843C39, 0xAD494A, 0xD6616B,
                                              0xE7969C, 0x7B4173, 0xA55194, 0xCE6DBD, 0xDE9ED6};

// ListedColormap.__call__ for a float in [0, 1]: entry int(v * N), 1 mapped to the last.
uint32_t tab20b(double value) {
  const double scaled = value * static_cast<double>(kTab20b.size());
  const int last = static_cast<int>(kTab20b.size()) - 1;
  const int i = scaled >= static_cast<double>(kTab20b.size()) ? last : static_cast<int>(scaled);
  return kTab20b[std::clamp(i, 0, last)];
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// The two dimensions a tile spans in its picture: rows (the last-but-one dimension, or one row
// for rank 1) and columns (the last dimension).
meshvk::Slice row_slice(const PictureTile& t) {
  return t.index.size() >= 2 ? t.index[t.index.size() - 2] : meshvk::Slice{0, 1};
}
meshvk::Slice col_slice(const PictureTile& t) {
  return t.index.empty() ? meshvk::Slice{0, 1} : t.index.back();
}

bool overlap(const meshvk::Slice& a, const meshvk::Slice& b) {
  return std::max(a.start, b.start) < std::min(a.stop, b.stop);
}

double fraction(int64_t at, int64_t dim) {
  return dim > 0 ? static_cast<double>(at) / static_cast<double>(dim) : 0.0;
}

// Devices by their coordinates along a mesh's manual axes (inside shard_map): group 0 for
// every device when the mesh has none.
struct ManualGroups {
  std::vector<std::string> names;             // the manual axes
  std::map<int, std::vector<int>> coords_of;  // device -> its manual coordinates
  std::map<std::vector<int>, int> group_of_coords;
  std::vector<std::vector<int>> devices;  // per group, ascending
  bool any() const { return !names.empty(); }
  int group_of(int device) const {
    const auto it = coords_of.find(device);
    return it == coords_of.end() ? 0 : group_of_coords.at(it->second);
  }
  // "CPU 3 local block (a=1, b=1)"; a group of several devices (automatic axes left) names them.
  std::string header(int group, const std::string& kind) const {
    std::string text = kind + " ";
    const auto& ds = devices[group];
    for (size_t i = 0; i < ds.size(); ++i) text += (i ? "," : "") + std::to_string(ds[i]);
    text += " local block (";
    const auto& c = coords_of.at(ds.front());
    for (size_t a = 0; a < names.size(); ++a)
      text += (a ? ", " : "") + names[a] + "=" + std::to_string(c[a]);
    return text + ")";
  }
};

ManualGroups manual_groups(const meshvk::Sharding& sharding) {
  ManualGroups g;
  const meshvk::NamedSharding* named = sharding.named();
  if (!named) return g;
  const meshvk::Mesh& mesh = named->mesh();
  std::vector<int> axes;
  for (int a = 0; a < mesh.ndim(); ++a)
    if (mesh.axis_types()[a] == meshvk::AxisType::Manual) {
      axes.push_back(a);
      g.names.push_back(mesh.axis_names()[a]);
    }
  if (axes.empty()) return g;
  for (int p = 0; p < mesh.size(); ++p) {
    const std::vector<int> all = mesh.coords(p);
    std::vector<int> c;
    for (const int a : axes) c.push_back(all[a]);
    g.coords_of[mesh.device_ids()[p]] = c;
    g.group_of_coords.emplace(c, 0);
  }
  int n = 0;
  for (auto& [c, group] : g.group_of_coords) group = n++;
  g.devices.resize(n);
  for (const auto& [device, c] : g.coords_of) g.devices[g.group_of_coords.at(c)].push_back(device);
  return g;
}

}  // namespace

std::vector<uint32_t> jax_cell_colors(int n) {
  // make_color_iter: walks numpy.linspace(0, 1, n) with a stride of about half the colours.
  std::vector<uint32_t> out;
  if (n <= 0) return out;
  int idx = 0;
  for (int k = 0; k < n; ++k) {
    const double value = n > 1 ? (idx == n - 1 ? 1.0 : idx * (1.0 / (n - 1))) : 0.0;
    out.push_back(tab20b(value));
    idx = (idx + n / 2 + (n % 2 == 0 ? 1 : 0)) % n;
  }
  return out;
}

bool tiles_adjacent(const PictureTile& a, const PictureTile& b) {
  if (a.slice != b.slice) return false;
  const meshvk::Slice ar = row_slice(a), br = row_slice(b), ac = col_slice(a), bc = col_slice(b);
  const bool side = (ac.stop == bc.start || bc.stop == ac.start) && overlap(ar, br);
  const bool above = (ar.stop == br.start || br.stop == ar.start) && overlap(ac, bc);
  return side || above;
}

ShardingPicture make_sharding_picture(const meshvk::Shape& shape, const meshvk::Sharding& sharding,
                                      meshvk::DType dtype) {
  ShardingPicture pic;
  std::vector<meshvk::DeviceIndex> map;
  std::string kind;
  try {
    map = sharding.devices_indices_map(shape);
    kind = upper(sharding.platform());
  } catch (const std::exception& e) {
    pic.error = e.what();
    return pic;
  }
  const size_t rank = shape.size();
  const size_t lead = rank > 2 ? rank - 2 : 0;
  const int64_t rows_dim = rank >= 2 ? shape[rank - 2] : 1;
  const int64_t cols_dim = rank >= 1 ? shape[rank - 1] : 1;

  // One tile per distinct box, in order of the boxes (leading slices first, then row-major):
  // devices_indices_map lists devices, and several devices hold one box when it is replicated.
  const auto box_key = [](const meshvk::Index& index) {
    std::vector<std::pair<int64_t, int64_t>> key;
    for (const auto& s : index) key.emplace_back(s.start, s.stop);
    return key;
  };
  // Inside shard_map a value is per device: along its mesh's manual axes every device holds
  // its own block (different data), though the spec names none of them. Devices are grouped
  // by their manual coordinates, each group a picture of its own, so that no block is drawn as
  // shared by devices that do not share it. The group leads each box's key.
  const ManualGroups manual = manual_groups(sharding);
  std::map<std::vector<std::pair<int64_t, int64_t>>, std::set<int>> boxes;
  std::map<std::vector<std::pair<int64_t, int64_t>>, meshvk::Index> box_index;
  for (const auto& entry : map) {
    auto key = box_key(entry.index);
    key.insert(key.begin(), {manual.group_of(entry.device), 0});
    boxes[key].insert(entry.device);
    box_index[key] = entry.index;
  }
  // Pictures: one per distinct leading box; within one, the grid positions are the ranks of
  // the pieces' starts (JAX's start / size for even pieces).
  std::map<std::vector<std::pair<int64_t, int64_t>>, int> slice_of;
  for (const auto& [key, devices] : boxes) {
    const std::vector<std::pair<int64_t, int64_t>> leading(key.begin(), key.begin() + 1 + lead);
    slice_of.emplace(leading, 0);
  }
  std::vector<std::set<int64_t>> row_starts(slice_of.size()), col_starts(slice_of.size());
  {
    int s = 0;
    for (auto& [leading, id] : slice_of) id = s++;
  }
  for (const auto& [key, devices] : boxes) {
    const int s = slice_of.at({key.begin(), key.begin() + 1 + lead});
    row_starts[s].insert(rank >= 2 ? key[1 + rank - 2].first : 0);
    col_starts[s].insert(rank >= 1 ? key[1 + rank - 1].first : 0);
  }
  for (const auto& [leading, id] : slice_of) {
    PictureSlice slice;
    slice.rows = static_cast<int>(row_starts[id].size());
    slice.cols = static_cast<int>(col_starts[id].size());
    slice.aspect = rows_dim > 0 && cols_dim > 0
                       ? static_cast<double>(rows_dim) / static_cast<double>(cols_dim)
                       : 1.0;
    if (rank > 2) {
      slice.header = "[";
      for (size_t d = 0; d < lead; ++d) {
        const auto& box = leading[1 + d];
        const bool whole = box.first == 0 && box.second == shape[d];
        slice.header += whole ? ":" : std::to_string(box.first) + ":" + std::to_string(box.second);
        slice.header += ", ";
      }
      slice.header += ":, :]";
    }
    if (manual.any()) {
      const std::string group = manual.header(static_cast<int>(leading[0].first), kind);
      slice.header = slice.header.empty() ? group : group + " " + slice.header;
    }
    pic.slices.push_back(std::move(slice));
  }
  const auto position = [](const std::set<int64_t>& starts, int64_t start) {
    return static_cast<int>(std::distance(starts.begin(), starts.find(start)));
  };
  for (const auto& [key, devices] : boxes) {
    PictureTile t;
    t.index = box_index.at(key);
    t.slice = slice_of.at({key.begin(), key.begin() + 1 + lead});
    t.devices.assign(devices.begin(), devices.end());
    const meshvk::Slice r = row_slice(t), c = col_slice(t);
    t.row = position(row_starts[t.slice], r.start);
    t.col = position(col_starts[t.slice], c.start);
    // A zero-size dimension draws as one undivided piece, as the terminal does.
    t.y0 = rows_dim > 0 ? fraction(r.start, rows_dim) : 0.0;
    t.y1 = rows_dim > 0 ? fraction(r.stop, rows_dim) : 1.0;
    t.x0 = cols_dim > 0 ? fraction(c.start, cols_dim) : 0.0;
    t.x1 = cols_dim > 0 ? fraction(c.stop, cols_dim) : 1.0;
    t.label = kind + " ";
    for (size_t i = 0; i < t.devices.size(); ++i)
      t.label += (i ? "," : "") + std::to_string(t.devices[i]);
    if (manual.any()) t.label += " local";
    uint64_t elements = 1;
    for (const auto& s : t.index) {
      const auto n = static_cast<uint64_t>(std::max<int64_t>(s.size(), 0));
      elements = n != 0 && elements > std::numeric_limits<uint64_t>::max() / n
                     ? std::numeric_limits<uint64_t>::max()
                     : elements * n;
    }
    const uint64_t item = meshvk::dtype_size(dtype);
    t.bytes = elements > std::numeric_limits<uint64_t>::max() / item
                  ? std::numeric_limits<uint64_t>::max()
                  : elements * item;
    pic.tiles.push_back(std::move(t));
  }
  std::stable_sort(pic.tiles.begin(), pic.tiles.end(), [](const auto& a, const auto& b) {
    return std::tie(a.slice, a.row, a.col) < std::tie(b.slice, b.row, b.col);
  });

  // JAX's colours, restarting per picture as the terminal's do; then the window's: a tile
  // that would share its colour with a neighbour drawn before it takes the first colour of
  // the walk over all 20 that no neighbour has, so every edge between two tiles is visible.
  const std::vector<uint32_t> walk = jax_cell_colors(static_cast<int>(kTab20b.size()));
  for (size_t i = 0; i < pic.tiles.size(); ++i) {
    PictureTile& t = pic.tiles[i];
    const PictureSlice& s = pic.slices[t.slice];
    const auto colors = jax_cell_colors(s.rows * s.cols);
    t.jax_rgb =
        colors[std::min<size_t>(static_cast<size_t>(t.row) * s.cols + t.col, colors.size() - 1)];
    std::set<uint32_t> taken;
    for (size_t j = 0; j < i; ++j)
      if (tiles_adjacent(t, pic.tiles[j])) taken.insert(pic.tiles[j].rgb);
    t.rgb = t.jax_rgb;
    if (taken.count(t.rgb))
      for (const uint32_t c : walk)
        if (!taken.count(c)) {
          t.rgb = c;
          break;
        }
  }
  // Each device's own block gets a colour of its own: they hold different data.
  if (manual.any()) {
    const auto colors = jax_cell_colors(static_cast<int>(pic.tiles.size()));
    for (size_t i = 0; i < pic.tiles.size(); ++i)
      pic.tiles[i].rgb = pic.tiles[i].jax_rgb = colors[i];
  }
  return pic;
}

std::vector<uint32_t> ansi_background_colors(const std::string& text) {
  std::vector<uint32_t> out;
  size_t at = 0;
  while ((at = text.find("48;2;", at)) != std::string::npos) {
    at += 5;
    int rgb[3] = {0, 0, 0};
    for (int k = 0; k < 3; ++k) {
      while (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at])))
        rgb[k] = std::min(rgb[k] * 10 + (text[at++] - '0'), 255);
      if (at < text.size() && text[at] == ';') ++at;
    }
    const uint32_t c = (uint32_t(rgb[0]) << 16) | (uint32_t(rgb[1]) << 8) | uint32_t(rgb[2]);
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

}  // namespace inspector
