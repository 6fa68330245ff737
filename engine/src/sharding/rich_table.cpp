#include "rich_table.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string_view>

// Each function below names the rich 13 code it mirrors. Names and control flow follow rich
// closely on purpose: the corner cases (a column narrower than its cell's padding, text that
// has to wrap, a table wider than the console) only come out as rich prints them when the same
// steps run in the same order.

namespace meshvk::detail {
namespace {

// A run of text in one style (rich.segment.Segment). `sgr` empty means unstyled.
struct Segment {
  std::string text;
  std::string sgr;
};
using Line = std::vector<Segment>;

// Terminal cells taken by UTF-8 text. Everything drawn here (ASCII, box drawing, the ellipsis)
// is one cell wide, so this counts characters.
int cell_len(std::string_view text) {
  int cells = 0;
  for (const unsigned char c : text)
    if ((c & 0xC0) != 0x80) ++cells;
  return cells;
}

// The first `cells` characters of `text` (rich.cells.set_cell_size when cropping).
std::string cell_prefix(std::string_view text, int cells) {
  size_t end = 0;
  int seen = 0;
  while (end < text.size()) {
    if ((static_cast<unsigned char>(text[end]) & 0xC0) != 0x80) {
      if (seen == cells) break;
      ++seen;
    }
    ++end;
  }
  return std::string(text.substr(0, end));
}

std::string spaces(int count) {
  return std::string(static_cast<size_t>(std::max(count, 0)), ' ');
}

std::string repeat(std::string_view piece, int count) {
  std::string s;
  for (int i = 0; i < count; ++i) s += piece;
  return s;
}

int line_len(const Line& line) {
  int cells = 0;
  for (const Segment& s : line) cells += cell_len(s.text);
  return cells;
}

bool is_space(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}

// ---------------------------------------------------------------------------------------------
// Measurement (rich.measure.Measurement): the least and most cells a renderable wants.

struct Measurement {
  int minimum = 0;
  int maximum = 0;

  Measurement normalize() const {
    const int lo = std::min(std::max(0, minimum), maximum);
    return {std::max(0, lo), std::max(0, std::max(lo, maximum))};
  }
  Measurement with_maximum(int width) const {
    return {std::min(minimum, width), std::min(maximum, width)};
  }
};

// Text.__rich_measure__: the longest word and the whole (single-line) text.
Measurement measure_text(std::string_view text) {
  int longest_word = 0;
  int word = 0;
  for (const char c : text) {
    word = is_space(c) ? 0 : word + 1;
    longest_word = std::max(longest_word, word);
  }
  const int whole = cell_len(text);
  return {longest_word > 0 ? longest_word : whole, whole};
}

// Measurement.get: clamps what a renderable reports to the available width.
Measurement clamp_measurement(Measurement m, int max_width) {
  m = m.normalize().with_maximum(max_width);
  if (m.maximum < 1) return {0, 0};
  return m.normalize();
}

// Measurement.get(Padding(Align(text))) at `max_width`.
Measurement measure_cell(const RichCell& cell, int max_width) {
  if (max_width < 1) return {0, 0};
  const int extra = cell.left + cell.right;
  Measurement m;
  if (max_width - extra < 1) {
    m = {max_width, max_width};
  } else {
    const Measurement text = clamp_measurement(measure_text(cell.text), max_width);
    m = Measurement{text.minimum + extra, text.maximum + extra}.with_maximum(max_width);
  }
  return clamp_measurement(m, max_width);
}

// Table._measure_column.
Measurement measure_column(const std::vector<std::vector<RichCell>>& rows, size_t column,
                           int max_width) {
  if (max_width < 1) return {0, 0};
  Measurement m{0, 0};
  for (const auto& row : rows) {
    const Measurement cell = measure_cell(row[column], max_width);
    m.minimum = std::max(m.minimum, cell.minimum);
    m.maximum = std::max(m.maximum, cell.maximum);
  }
  return m.with_maximum(max_width);
}

// ---------------------------------------------------------------------------------------------
// Column widths (Table._calculate_column_widths for a table that does not expand).

// rich._ratio.ratio_reduce: takes `total` cells away from `values` in proportion to `ratios`,
// at most `maximums[i]` from each. Python's round() rounds halves to even, as nearbyint does.
std::vector<int> ratio_reduce(int total, std::vector<int> ratios, const std::vector<int>& maximums,
                              const std::vector<int>& values) {
  for (size_t i = 0; i < ratios.size(); ++i)
    if (!maximums[i]) ratios[i] = 0;
  int total_ratio = 0;
  for (const int r : ratios) total_ratio += r;
  if (!total_ratio) return values;
  int total_remaining = total;
  std::vector<int> result;
  for (size_t i = 0; i < values.size(); ++i) {
    if (ratios[i] && total_ratio > 0) {
      const double share = static_cast<double>(ratios[i] * total_remaining) / total_ratio;
      const int distributed = std::min(maximums[i], static_cast<int>(std::nearbyint(share)));
      result.push_back(values[i] - distributed);
      total_remaining -= distributed;
      total_ratio -= ratios[i];
    } else {
      result.push_back(values[i]);
    }
  }
  return result;
}

int sum(const std::vector<int>& values) {
  int total = 0;
  for (const int v : values) total += v;
  return total;
}

// Table._collapse_widths with every column wrappable: repeatedly narrows the widest columns
// towards the next widest until the table fits.
std::vector<int> collapse_widths(std::vector<int> widths, int max_width) {
  int total_width = sum(widths);
  int excess_width = total_width - max_width;
  while (total_width && excess_width > 0) {
    const int max_column = *std::max_element(widths.begin(), widths.end());
    int second_max_column = 0;
    for (const int w : widths)
      if (w != max_column) second_max_column = std::max(second_max_column, w);
    const int column_difference = max_column - second_max_column;
    std::vector<int> ratios;
    for (const int w : widths) ratios.push_back(w == max_column ? 1 : 0);
    if (!column_difference) break;
    const std::vector<int> max_reduce(widths.size(), std::min(excess_width, column_difference));
    widths = ratio_reduce(excess_width, ratios, max_reduce, widths);
    total_width = sum(widths);
    excess_width = total_width - max_width;
  }
  return widths;
}

std::vector<int> column_widths(const std::vector<std::vector<RichCell>>& rows, size_t columns,
                               int max_width) {
  std::vector<int> widths;
  for (size_t c = 0; c < columns; ++c) {
    const int natural = measure_column(rows, c, max_width).maximum;
    widths.push_back(natural ? natural : 1);
  }
  if (sum(widths) <= max_width) return widths;
  widths = collapse_widths(widths, max_width);
  if (sum(widths) > max_width) {
    // Last resort: take the excess from every column evenly.
    const std::vector<int> ones(widths.size(), 1);
    widths = ratio_reduce(sum(widths) - max_width, ones, widths, widths);
  }
  for (size_t c = 0; c < columns; ++c)
    widths[c] = measure_column(rows, c, std::max(0, widths[c])).maximum;
  return widths;
}

// ---------------------------------------------------------------------------------------------
// Rendering one cell.

// The words of `text` with their trailing spaces (rich._wrap.words), as (start, word).
std::vector<std::pair<size_t, std::string>> words(const std::string& text) {
  std::vector<std::pair<size_t, std::string>> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = pos;
    while (end < text.size() && is_space(text[end])) ++end;
    if (end == text.size()) break;  // \s*\S+\s* needs a non-space
    while (end < text.size() && !is_space(text[end])) ++end;
    while (end < text.size() && is_space(text[end])) ++end;
    out.emplace_back(pos, text.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

int rstripped_len(const std::string& word) {
  size_t end = word.size();
  while (end > 0 && is_space(word[end - 1])) --end;
  return cell_len(std::string_view(word).substr(0, end));
}

// rich._wrap.divide_line without folding: the offsets where wrapped lines start.
std::vector<size_t> divide_line(const std::string& text, int width) {
  std::vector<size_t> divides;
  int line_position = 0;
  for (const auto& [start, word] : words(text)) {
    const int word_length = rstripped_len(word);
    if (line_position + word_length > width) {
      if (word_length > width) {
        if (start) divides.push_back(start);
        line_position = cell_len(word);
      } else if (line_position && start) {
        divides.push_back(start);
        line_position = cell_len(word);
      }
    } else {
      line_position += cell_len(word);
    }
  }
  return divides;
}

// Text.wrap with justify="left" and overflow="ellipsis" (a table column's defaults): each line
// comes back exactly `width` cells wide.
std::vector<std::string> wrap_text(const std::string& text, int width) {
  std::vector<size_t> cuts = divide_line(text, width);
  cuts.insert(cuts.begin(), 0);
  cuts.push_back(text.size());
  std::vector<std::string> lines;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    std::string line = text.substr(cuts[i], cuts[i + 1] - cuts[i]);
    // Text.rstrip_end: drop trailing whitespace that hangs past the width.
    const int length = cell_len(line);
    if (length > width) {
      size_t trailing = 0;
      while (trailing < line.size() && is_space(line[line.size() - 1 - trailing])) ++trailing;
      line.resize(line.size() - std::min<size_t>(trailing, length - width));
    }
    // Lines.justify("left") then Text.truncate: an ellipsis for what does not fit, spaces to
    // pad what is short.
    const int cells = cell_len(line);
    if (cells > width)
      line = cell_prefix(line, width - 1) + "\u2026";
    else
      line += spaces(width - cells);
    lines.push_back(std::move(line));
  }
  return lines;
}

// Align(text, "center") rendered `width` cells wide: Console.render draws nothing below one
// cell; the text wraps when it is wider, and is centred as a block when it is narrower.
std::vector<Line> render_align(const RichCell& cell, int width) {
  std::vector<Line> lines;
  if (width < 1) return lines;
  const int text_width = std::min(cell_len(cell.text), width);
  const int excess = width - text_width;
  const int left = excess / 2;
  for (std::string& text : wrap_text(cell.text, text_width)) {
    Line line;
    if (excess > 0 && left > 0) line.push_back({spaces(left), cell.sgr});
    line.push_back({std::move(text), cell.sgr});
    if (excess > 0) line.push_back({spaces(excess - left), cell.sgr});
    lines.push_back(std::move(line));
  }
  return lines;
}

// Padding(Align(...), pad, style) as a table renders it into a column `width` cells wide.
// Padding expands to the column width and the text is centred in what the padding leaves; when
// the padding leaves nothing, only the blank top and bottom lines are drawn.
std::vector<Line> render_cell(const RichCell& cell, int width) {
  std::vector<Line> lines;
  if (width < 1) return lines;
  const Line blank{{spaces(width), cell.sgr}};
  for (int i = 0; i < cell.top; ++i) lines.push_back(blank);
  for (Line& text : render_align(cell, std::max(0, width - cell.left - cell.right))) {
    Line line;
    if (cell.left) line.push_back({spaces(cell.left), cell.sgr});
    line.insert(line.end(), text.begin(), text.end());
    if (cell.right) line.push_back({spaces(cell.right), cell.sgr});
    lines.push_back(std::move(line));
  }
  for (int i = 0; i < cell.bottom; ++i) lines.push_back(blank);
  return lines;
}

// Segment.adjust_line_length: pads a short line with unstyled spaces, or crops a long one.
Line fit_line(Line line, int width, bool pad) {
  const int length = line_len(line);
  if (length < width) {
    if (pad) line.push_back({spaces(width - length), ""});
    return line;
  }
  if (length == width) return line;
  Line cropped;
  int used = 0;
  for (Segment& s : line) {
    const int cells = cell_len(s.text);
    if (used + cells < width) {
      used += cells;
      cropped.push_back(std::move(s));
    } else {
      cropped.push_back({cell_prefix(s.text, width - used), s.sgr});
      break;
    }
  }
  return cropped;
}

// Style.render: the styled text between its SGR sequence and a reset.
std::string to_ansi(const Line& line) {
  std::string out;
  for (const Segment& s : line) {
    if (s.text.empty()) continue;
    if (s.sgr.empty())
      out += s.text;
    else
      out += "\x1b[" + s.sgr + "m" + s.text + "\x1b[0m";
  }
  return out;
}

// rich.box.SQUARE rules: the line above, between and below rows.
std::string box_rule(const std::vector<int>& widths, std::string_view left, std::string_view cross,
                     std::string_view right) {
  std::string rule(left);
  for (size_t c = 0; c < widths.size(); ++c) {
    if (c) rule += cross;
    rule += repeat("\u2500", widths[c]);
  }
  return rule + std::string(right);
}

// Box edges and the dividers between columns take cells from the console width.
int border_width(size_t columns, const RichTableOptions& options) {
  return options.boxed ? 2 + static_cast<int>(columns) - 1 : 0;
}

// The lines render_cell draws for `cell` in a column `width` cells wide, without drawing them.
size_t cell_height(const RichCell& cell, int width) {
  if (width < 1) return 0;
  const int inner = std::max(0, width - cell.left - cell.right);
  const size_t text_lines =
      inner < 1 ? 0 : wrap_text(cell.text, std::min(cell_len(cell.text), inner)).size();
  return static_cast<size_t>(cell.top) + text_lines + static_cast<size_t>(cell.bottom);
}

}  // namespace

RichTableSize measure_rich_table(const std::vector<std::vector<RichCell>>& rows,
                                 const RichTableOptions& options) {
  if (rows.empty() || rows[0].empty()) return {1, 0};
  const size_t columns = rows[0].size();
  const int border = border_width(columns, options);
  const std::vector<int> widths = column_widths(rows, columns, options.console_width - border);
  RichTableSize size;
  size.width = border;
  for (const int w : widths) size.width += std::max(w, 1);
  if (options.boxed) size.lines += static_cast<int64_t>(rows.size()) + 1;  // the rules
  for (const auto& row : rows) {
    size_t row_height = 1;
    for (size_t c = 0; c < columns; ++c)
      row_height = std::max(row_height, cell_height(row[c], widths[c]));
    size.lines += static_cast<int64_t>(row_height);
  }
  return size;
}

std::vector<std::string> render_rich_table(const std::vector<std::vector<RichCell>>& rows,
                                           const RichTableOptions& options) {
  if (rows.empty() || rows[0].empty()) return {""};
  const size_t columns = rows[0].size();
  const std::vector<int> widths =
      column_widths(rows, columns, options.console_width - border_width(columns, options));

  // The Console crops every line to its width. Each line is written out as soon as it is
  // complete, so only one row's cells are held as segments at a time.
  std::vector<std::string> out;
  const auto emit = [&](Line line) {
    out.push_back(to_ansi(fit_line(std::move(line), options.console_width, false)));
  };
  const std::string vertical = "\u2502";
  if (options.boxed) emit({{box_rule(widths, "\u250c", "\u252c", "\u2510"), ""}});
  for (size_t r = 0; r < rows.size(); ++r) {
    std::vector<std::vector<Line>> cells;
    size_t row_height = 1;
    for (size_t c = 0; c < columns; ++c) {
      cells.push_back(render_cell(rows[r][c], widths[c]));
      row_height = std::max(row_height, cells.back().size());
    }
    // Cells align to the top: shorter ones get unstyled blank lines at the bottom.
    for (size_t c = 0; c < columns; ++c) {
      for (Line& line : cells[c]) line = fit_line(std::move(line), widths[c], true);
      cells[c].resize(row_height, Line{{spaces(widths[c]), ""}});
    }
    for (size_t i = 0; i < row_height; ++i) {
      Line line;
      if (options.boxed) line.push_back({vertical, ""});
      for (size_t c = 0; c < columns; ++c) {
        if (options.boxed && c) line.push_back({vertical, ""});
        line.insert(line.end(), cells[c][i].begin(), cells[c][i].end());
      }
      if (options.boxed) line.push_back({vertical, ""});
      emit(std::move(line));
    }
    if (options.boxed && r + 1 < rows.size())
      emit({{box_rule(widths, "\u251c", "\u253c", "\u2524"), ""}});
  }
  if (options.boxed) emit({{box_rule(widths, "\u2514", "\u2534", "\u2518"), ""}});
  return out;
}

}  // namespace meshvk::detail
