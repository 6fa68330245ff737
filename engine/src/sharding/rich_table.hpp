#pragma once
// A small re-implementation of the part of Python's `rich` library that
// jax.debug.visualize_sharding uses: a Table with show_header=False, padding=0, pad_edge=False,
// whose cells are Padding(Align(text, "center", vertical="middle"), (top, right, bottom, left),
// style=...), printed by a Console of a fixed width. It follows rich 13's algorithms (column
// measurement, shrinking to fit, word wrapping with an ellipsis, cropping to the console width)
// so that the text, and in colour mode the exact escape sequences, come out as rich prints them.
// Checked byte for byte against rich 13.3.1 on random layouts, including tables wider than the
// console. That part (shrinking, wrapping, ellipses) is rich's least stable behaviour: another
// rich version may break a too-narrow cell differently, so treat it as an approximation of
// whatever rich a given JAX install has. Pictures that fit the console do not depend on it.
#include <cstdint>
#include <string>
#include <vector>

namespace meshvk::detail {

struct RichCell {
  std::string text;  // one line of text; words are separated by spaces
  int top = 0;       // blank lines above the text (rich Padding)
  int right = 0;     // blank columns right of the text
  int bottom = 0;    // blank lines below the text
  int left = 0;      // blank columns left of the text
  // SGR parameters of the cell's style, as rich writes them ("38;2;255;255;255;48;2;57;59;121"
  // for white text on #393B79); empty for an unstyled cell.
  std::string sgr;
};

struct RichTableOptions {
  // rich.box.SQUARE borders with a rule between rows (show_lines=True); otherwise box=None.
  bool boxed = false;
  // The Console width: the table shrinks its columns to fit and lines are cropped to it.
  int console_width = 80;
};

// The lines the Console prints for a table of `rows` (all of equal length), without newlines.
std::vector<std::string> render_rich_table(const std::vector<std::vector<RichCell>>& rows,
                                           const RichTableOptions& options);

// The size of what render_rich_table would draw, found without drawing it: the lines it prints,
// and the table's width in cells before the console crops it (a column narrower than one cell
// counts as one, as drawing it still costs that much). Drawing takes time and memory in
// proportion to lines * width.
struct RichTableSize {
  int64_t lines = 0;
  int64_t width = 0;
};
RichTableSize measure_rich_table(const std::vector<std::vector<RichCell>>& rows,
                                 const RichTableOptions& options);

}  // namespace meshvk::detail
