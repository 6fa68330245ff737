// visualize_sharding: the picture jax.debug.visualize_array_sharding prints, following
// jax/_src/debugging.py `visualize_sharding` step by step, drawn by the rich-table renderer in
// rich_table.cpp.
//
// Without colour JAX lets rich highlight the device numbers when printing to a terminal; this
// plain mode writes no escape codes at all, only the boxes and text.
//
// Beyond JAX (which only accepts rank 1 and 2):
//  - rank 0 draws one cell holding every device, as a rank-1 array with a single element would;
//  - rank 3 and above draws one 2-D picture of the last two dimensions per distinct slice of the
//    leading dimensions, in order, each under a header such as "[0:2, :, :]" (a leading
//    dimension that is not split shows as ':'), with a blank line between pictures. Colours
//    restart for each picture, as if JAX had been called once per slice.
//  - a zero-size dimension (where JAX divides by zero) draws as one undivided chunk, and the
//    picture is drawn as if the array were square.
#include "meshvk/visualize.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include "meshvk/error.hpp"
#include "runtime/env.hpp"
#include "rich_table.hpp"

namespace meshvk {
namespace {

// ---------------------------------------------------------------------------------------------
// Colours: matplotlib's tab20b colormap, picked in the order JAX's make_color_iter picks them.

struct Rgb {
  int r = 0, g = 0, b = 0;
};

// matplotlib/_cm.py _tab20b_data, exactly: JAX converts these floats with int(x * 255).
constexpr std::array<std::array<double, 3>, 20> kTab20b = {{
    {0.2235294117647059, 0.23137254901960785, 0.4745098039215686},   // 393b79
    {0.3215686274509804, 0.32941176470588235, 0.6392156862745098},   // 5254a3
    {0.4196078431372549, 0.43137254901960786, 0.8117647058823529},   // 6b6ecf
    {0.611764705882353, 0.6196078431372549, 0.8705882352941177},     // 9c9ede
    {0.38823529411764707, 0.4745098039215686, 0.2235294117647059},   // 637939
    {0.5490196078431373, 0.6352941176470588, 0.3215686274509804},    // 8ca252
    {0.7098039215686275, 0.8117647058823529, 0.4196078431372549},    // b5cf6b
    {0.807843137254902, 0.8588235294117647, 0.611764705882353},      // cedb9c
    {0.5490196078431373, 0.42745098039215684, 0.19215686274509805},  // 8c6d31
    {0.7411764705882353, 0.6196078431372549, 0.2235294117647059},    // bd9e39
    {0.9058823529411765, 0.7294117647058823, 0.3215686274509804},    // e7ba52
    {0.9058823529411765, 0.796078431372549, 0.5803921568627451},     // e7cb94
    {0.5176470588235295, 0.23529411764705882, 0.2235294117647059},   // 843c39
    {0.6784313725490196, 0.28627450980392155, 0.2901960784313726},   // ad494a
    {0.8392156862745098, 0.3803921568627451, 0.4196078431372549},    // d6616b
    {0.9058823529411765, 0.5882352941176471, 0.611764705882353},     // e7969c
    {0.4823529411764706, 0.2549019607843137, 0.45098039215686275},   // 7b4173
    {0.6470588235294118, 0.3176470588235294, 0.5803921568627451},    // a55194
    {0.807843137254902, 0.42745098039215684, 0.7411764705882353},    // ce6dbd
    {0.8705882352941177, 0.6196078431372549, 0.8392156862745098},    // de9ed6
}};

// ListedColormap.__call__ for a float in [0, 1]: entry int(v * N), with v == 1 mapped to the last.
Rgb tab20b(double value) {
  const double scaled = value * static_cast<double>(kTab20b.size());
  int i = scaled == static_cast<double>(kTab20b.size()) ? static_cast<int>(kTab20b.size()) - 1
                                                        : static_cast<int>(scaled);
  i = std::clamp(i, 0, static_cast<int>(kTab20b.size()) - 1);
  const auto& c = kTab20b[i];
  return {static_cast<int>(c[0] * 255), static_cast<int>(c[1] * 255), static_cast<int>(c[2] * 255)};
}

// make_color_iter: walks numpy.linspace(0, 1, n) taking strides of about half the colours, so
// that neighbouring cells get far-apart colours.
std::vector<Rgb> jax_cell_colors(int num_colors) {
  std::vector<double> values(num_colors, 0.0);
  if (num_colors > 1) {
    const double step = 1.0 / (num_colors - 1);  // numpy multiplies arange by delta / div
    for (int i = 0; i < num_colors; ++i) values[i] = i * step;
    values.back() = 1.0;
  }
  std::vector<Rgb> colors;
  int idx = 0;
  for (int k = 0; k < num_colors; ++k) {
    colors.push_back(tab20b(values[idx]));
    idx = (idx + num_colors / 2 + (num_colors % 2 == 0 ? 1 : 0)) % num_colors;
  }
  return colors;
}

// _get_text_color: black on light backgrounds, white on dark ones.
Rgb text_color_for(Rgb background) {
  const double luma = background.r * 0.299 + background.g * 0.587 + background.b * 0.114;
  return luma > 186 ? Rgb{0, 0, 0} : Rgb{255, 255, 255};
}

// The SGR parameters rich writes for Style(color=text, bgcolor=background) in truecolor.
std::string sgr(Rgb text, Rgb background) {
  auto rgb = [](Rgb c) {
    return std::to_string(c.r) + ";" + std::to_string(c.g) + ";" + std::to_string(c.b);
  };
  return "38;2;" + rgb(text) + ";48;2;" + rgb(background);
}

// ---------------------------------------------------------------------------------------------
// Grouping devices into chunks of a rank-1 or rank-2 array.

// Python's divmod for a positive divisor: the quotient rounds down, the remainder is >= 0.
std::pair<int64_t, int64_t> floor_divmod(int64_t a, int64_t b) {
  int64_t q = a / b;
  int64_t r = a % b;
  if (r != 0 && (r < 0) != (b < 0)) {
    --q;
    r += b;
  }
  return {q, r};
}

// _slice_to_chunk_idx: which piece of its dimension a slice is.
int64_t chunk_index(const Slice& s) {
  return s.size() > 0 ? s.start / s.size() : 0;
}

// The fraction of a dimension a slice covers; a zero-size dimension counts as one whole chunk.
double chunk_fraction(const Slice& s, int64_t dim) {
  return dim > 0 ? static_cast<double>(s.size()) / static_cast<double>(dim) : 1.0;
}

// One cell of the picture: the devices holding that chunk and its share of the array.
struct Chunk {
  std::set<int> devices;
  std::optional<double> height;  // none for rank 1, drawn one line high
  double width = 1.0;
};

// Key (row, column) of each chunk, as JAX's `slices` dict, with rank 1 on row 0.
std::map<std::pair<int64_t, int64_t>, Chunk> group_chunks(const Shape& shape,
                                                          const std::vector<DeviceIndex>& map) {
  std::map<std::pair<int64_t, int64_t>, Chunk> chunks;
  for (const DeviceIndex& entry : map) {
    if (shape.size() == 2) {
      const Slice& vert = entry.index[0];
      const Slice& horiz = entry.index[1];
      Chunk& chunk = chunks[{chunk_index(vert), chunk_index(horiz)}];
      chunk.height = chunk_fraction(vert, shape[0]);
      chunk.width = chunk_fraction(horiz, shape[1]);
      chunk.devices.insert(entry.device);
    } else {
      const Slice& horiz = entry.index[0];
      Chunk& chunk = chunks[{0, chunk_index(horiz)}];
      chunk.width = chunk_fraction(horiz, shape[0]);
      chunk.devices.insert(entry.device);
    }
  }
  return chunks;
}

std::string cell_label(const std::string& kind, const std::set<int>& devices) {
  std::string label = kind + " ";
  bool first = true;
  for (const int d : devices) {
    if (!first) label += ",";
    label += std::to_string(d);
    first = false;
  }
  return label;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// Characters drawn so far, across the slices of a rank 3+ array, against
// kVisualizeMaxCharacters.
struct Budget {
  int64_t used = 0;
  int pictures = 0;
};

[[noreturn]] void too_large(int64_t lines, int64_t width, const Budget& budget,
                            const VisualizeOptions& options) {
  std::string size;
  if (lines >= 0) {
    size = std::to_string(lines) + " lines of " + std::to_string(width) + " columns" +
           (width > options.max_width ? " (before cropping to max_width)" : "");
  } else {
    size = std::to_string(width) + " cells, at least one character each";
  }
  std::string total;
  if (budget.pictures > 0) {
    total = " after " + std::to_string(budget.used) + " characters for the " +
            std::to_string(budget.pictures) + " slice picture" + (budget.pictures > 1 ? "s" : "") +
            " before it";
  }
  char scale[32];
  std::snprintf(scale, sizeof scale, "%g", options.scale);
  throw Error(
      "visualize_sharding: the picture would be " + size + total + ", more than the " +
      std::to_string(kVisualizeMaxCharacters) +
      " characters a picture may hold (kVisualizeMaxCharacters); use a smaller scale (now " +
      scale + "), max_width (now " + std::to_string(options.max_width) + ") or min_width (now " +
      std::to_string(options.min_width) + "), or a layout with fewer pieces");
}

// Adds a picture of `lines` x `width` to the budget, or throws when it does not fit.
void charge(Budget& budget, int64_t lines, int64_t width, const VisualizeOptions& options) {
  int64_t size = 0;
  if (__builtin_mul_overflow(lines, width, &size) || size > kVisualizeMaxCharacters - budget.used) {
    too_large(lines, width, budget, options);
  }
  budget.used += size;
  ++budget.pictures;
}

// The picture of a rank-1 or rank-2 array: jax/_src/debugging.py visualize_sharding.
std::vector<std::string> render_picture(const Shape& shape, const std::vector<DeviceIndex>& map,
                                        const std::string& kind, const VisualizeOptions& options,
                                        bool use_color, Budget& budget) {
  const int64_t base_height = static_cast<int64_t>(10 * options.scale);
  const bool has_zero_size = shape[0] == 0 || (shape.size() == 2 && shape[1] == 0);
  const double aspect_ratio = has_zero_size
                                  ? 1.0
                                  : (shape.size() == 2 ? static_cast<double>(shape[1]) : 1.0) /
                                        static_cast<double>(shape[0]);
  const int64_t base_width = static_cast<int64_t>(static_cast<double>(base_height) * aspect_ratio);
  const double height_to_width_ratio = 2.5;

  const auto chunks = group_chunks(shape, map);
  int64_t num_rows = 0;
  int64_t num_cols = 0;
  for (const auto& [key, chunk] : chunks) {
    num_rows = std::max(num_rows, key.first + 1);
    num_cols = std::max(num_cols, key.second + 1);
  }
  // Every cell takes at least one character: refused before the cells are even made.
  if (num_rows * num_cols > kVisualizeMaxCharacters - budget.used)
    too_large(-1, num_rows * num_cols, budget, options);
  const std::vector<Rgb> colors = jax_cell_colors(static_cast<int>(num_rows * num_cols));

  std::vector<std::vector<detail::RichCell>> rows;
  size_t color_index = 0;
  for (int64_t i = 0; i < num_rows; ++i) {
    std::vector<detail::RichCell> row;
    for (int64_t j = 0; j < num_cols; ++j) {
      const auto it = chunks.find({i, j});
      if (it == chunks.end())
        throw Error("visualize_sharding: no device holds chunk (" + std::to_string(i) + ", " +
                    std::to_string(j) + ") of an array of shape " + shape_to_string(shape) +
                    "; every chunk of an evenly sharded array has a device");
      const Chunk& chunk = it->second;
      detail::RichCell cell;
      cell.text = cell_label(kind, chunk.devices);
      const int64_t text_len = static_cast<int64_t>(cell.text.size());
      int64_t width = static_cast<int64_t>(chunk.width * static_cast<double>(base_width) *
                                           height_to_width_ratio);
      const int64_t height =
          chunk.height ? static_cast<int64_t>(*chunk.height * static_cast<double>(base_height)) : 1;
      width = std::min<int64_t>(std::max<int64_t>(width, options.min_width), options.max_width);
      auto [left, left_rem] = floor_divmod(width - text_len - 2, 2);
      int64_t right = left + left_rem;
      auto [top, top_rem] = floor_divmod(height - 2, 2);
      int64_t bottom = top + top_rem;
      if (use_color) {
        const Rgb background = colors[color_index++];
        cell.sgr = sgr(text_color_for(background), background);
        ++top, ++bottom, ++left, ++right;
      }
      cell.top = static_cast<int>(std::max<int64_t>(top, 0));
      cell.right = static_cast<int>(std::max<int64_t>(right, 0));
      cell.bottom = static_cast<int>(std::max<int64_t>(bottom, 0));
      cell.left = static_cast<int>(std::max<int64_t>(left, 0));
      row.push_back(std::move(cell));
    }
    rows.push_back(std::move(row));
  }
  const detail::RichTableOptions table{.boxed = !use_color, .console_width = options.max_width};
  const detail::RichTableSize size = detail::measure_rich_table(rows, table);
  charge(budget, size.lines, size.width, options);
  return detail::render_rich_table(rows, table);
}

// "[0:2, :, :]": the leading slices of a rank >= 3 array, then ':' for the two drawn dimensions.
std::string leading_header(const Shape& shape, const Index& leading) {
  std::string header = "[";
  for (size_t d = 0; d < leading.size(); ++d) {
    const Slice& s = leading[d];
    const bool whole = s.start == 0 && s.stop == shape[d];
    header += whole ? ":" : std::to_string(s.start) + ":" + std::to_string(s.stop);
    header += ", ";
  }
  return header + ":, :]";
}

std::vector<std::string> render_leading_slices(const Shape& shape,
                                               const std::vector<DeviceIndex>& map,
                                               const std::string& kind,
                                               const VisualizeOptions& options, bool use_color,
                                               Budget& budget) {
  const size_t lead = shape.size() - 2;
  const Shape last_two(shape.end() - 2, shape.end());
  auto starts = [&](const Index& index) {
    std::vector<int64_t> key;
    for (size_t d = 0; d < lead; ++d) key.push_back(index[d].start);
    return key;
  };
  // Distinct leading slices in order, each with the devices holding part of it.
  std::map<std::vector<int64_t>, std::pair<Index, std::vector<DeviceIndex>>> groups;
  for (const DeviceIndex& entry : map) {
    auto& group = groups[starts(entry.index)];
    group.first.assign(entry.index.begin(), entry.index.begin() + lead);
    group.second.push_back({entry.device, Index(entry.index.begin() + lead, entry.index.end())});
  }
  std::vector<std::string> lines;
  for (const auto& [key, group] : groups) {
    if (!lines.empty()) lines.emplace_back();
    lines.push_back(leading_header(shape, group.first));
    for (std::string& line :
         render_picture(last_two, group.second, kind, options, use_color, budget))
      lines.push_back(std::move(line));
  }
  return lines;
}

void check_options(const VisualizeOptions& options) {
  if (!std::isfinite(options.scale) || options.scale < 0 || options.scale > 1000)
    throw Error("visualize_sharding: scale " + std::to_string(options.scale) +
                " is out of range; use a number from 0 to 1000 (1 draws a square array 10 lines "
                "high)");
  // Every cell is at least min_width wide and at most max_width: min_width = 2^30 drew cells a
  // GiB wide each, and the picture ran the machine out of memory.
  constexpr int kMaxWidth = 10000;
  if (options.min_width < 0 || options.min_width > kMaxWidth)
    throw Error("visualize_sharding: min_width " + std::to_string(options.min_width) +
                " is out of range; use 0 to " + std::to_string(kMaxWidth) + " (9 by default)");
  if (options.max_width < 1 || options.max_width > kMaxWidth)
    throw Error("visualize_sharding: max_width " + std::to_string(options.max_width) +
                " is out of range; use 1 to " + std::to_string(kMaxWidth) + " (80 by default)");
}

// Colours for a terminal: MESHVK_COLOR=0|1, else whether standard output is one. Under mpirun a
// process's standard output is Open MPI's pseudo-terminal wherever mpirun writes, so there the
// picture is plain unless asked for (as one process writing to a file prints it).
bool color_by_default() {
  if (const auto forced = detail::env_switch("MESHVK_COLOR")) return *forced;
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) return false;
  return isatty(STDOUT_FILENO) != 0;
}

}  // namespace

std::string visualize_sharding(const Shape& shape, const Sharding& sharding,
                               const VisualizeOptions& options) {
  check_options(options);
  const bool use_color = options.use_color.value_or(color_by_default());
  const std::string kind = upper(sharding.platform());
  std::vector<DeviceIndex> map = sharding.devices_indices_map(shape);

  std::vector<std::string> lines;
  Budget budget;
  if (shape.empty()) {
    // A scalar: every device holds the single element of a rank-1 array of one.
    for (DeviceIndex& entry : map) entry.index = {{0, 1}};
    lines = render_picture({1}, map, kind, options, use_color, budget);
  } else if (shape.size() <= 2) {
    lines = render_picture(shape, map, kind, options, use_color, budget);
  } else {
    lines = render_leading_slices(shape, map, kind, options, use_color, budget);
  }
  std::string out;
  for (const std::string& line : lines) out += line + "\n";
  return out;
}

}  // namespace meshvk
