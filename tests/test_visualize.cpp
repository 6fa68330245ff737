// The sharding model (Mesh, PartitionSpec, NamedSharding, Sharding) and visualize_sharding,
// checked against what JAX computes and prints. None of it needs the GPU runtime.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "sharding/rich_table.hpp"
#include "test_support.hpp"

namespace {

using meshvk::Error;
using meshvk::Index;
using meshvk::Mesh;
using meshvk::NamedSharding;
using meshvk::None;
using meshvk::P;
using meshvk::PartitionSpec;
using meshvk::Shape;
using meshvk::Sharding;
using meshvk::SingleDeviceSharding;
using meshvk::VisualizeOptions;

// ---------------------------------------------------------------------------------------------
// Helpers

std::string strip_ansi(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\x1b' && i + 1 < text.size() && text[i + 1] == '[') {
      i += 2;
      while (i < text.size() && text[i] != 'm') ++i;
      continue;
    }
    out += text[i];
  }
  return out;
}

std::string trim_right(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, sep)) parts.push_back(part);
  return parts;
}

// Lines of `text` with trailing spaces trimmed, as the golden files are compared.
std::vector<std::string> trimmed_lines(const std::string& text) {
  std::vector<std::string> lines;
  for (const std::string& line : split(text, '\n')) lines.push_back(trim_right(line));
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

// Terminal columns of UTF-8 text: every character drawn here is one column wide.
size_t columns(const std::string& text) {
  size_t n = 0;
  for (const unsigned char c : text)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The "CPU 0,1"-style labels of a picture, top to bottom and left to right.
std::vector<std::string> labels(const std::string& picture) {
  std::vector<std::string> found;
  for (const std::string& line : split(strip_ansi(picture), '\n')) {
    size_t pos = 0;
    while ((pos = line.find("PU ", pos)) != std::string::npos) {
      size_t end = pos + 3;
      while (end < line.size() &&
             (std::isdigit(static_cast<unsigned char>(line[end])) || line[end] == ','))
        ++end;
      found.push_back(line.substr(pos - 1, end - pos + 1));
      pos = end;
    }
  }
  return found;
}

// Background colours of a colour picture as "RRGGBB" hex, in order of first appearance.
std::vector<std::string> backgrounds(const std::string& picture) {
  std::vector<std::string> found;
  std::set<std::string> seen;
  size_t pos = 0;
  while ((pos = picture.find(";48;2;", pos)) != std::string::npos) {
    pos += 6;
    const size_t end = picture.find('m', pos);
    const std::vector<std::string> rgb = split(picture.substr(pos, end - pos), ';');
    char hex[8];
    std::snprintf(hex, sizeof hex, "%02X%02X%02X", std::stoi(rgb[0]), std::stoi(rgb[1]),
                  std::stoi(rgb[2]));
    if (seen.insert(hex).second) found.push_back(hex);
  }
  return found;
}

// Every ANSI style in a colour picture: "38;2;R;G;B;48;2;R;G;B".
std::set<std::string> styles(const std::string& picture) {
  std::set<std::string> found;
  size_t pos = 0;
  while ((pos = picture.find("\x1b[", pos)) != std::string::npos) {
    pos += 2;
    const size_t end = picture.find('m', pos);
    const std::string style = picture.substr(pos, end - pos);
    if (style != "0") found.insert(style);
  }
  return found;
}

VisualizeOptions colour() {
  VisualizeOptions o;
  o.use_color = true;
  return o;
}

VisualizeOptions plain() {
  VisualizeOptions o;
  o.use_color = false;
  return o;
}

Mesh mesh_4x2() {
  return Mesh({4, 2}, {"a", "b"});
}

Sharding named(const Mesh& mesh, const PartitionSpec& spec) {
  return NamedSharding(mesh, spec);
}

// index_to_string of every device's piece, in device order.
std::vector<std::string> pieces(const Sharding& sharding, const Shape& shape) {
  std::vector<std::string> out;
  for (const auto& entry : sharding.devices_indices_map(shape))
    out.push_back(std::to_string(entry.device) + "->" + meshvk::index_to_string(entry.index));
  return out;
}

// The message of the Error `f` throws; fails the test when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected meshvk::Error";
  return "";
}

// ---------------------------------------------------------------------------------------------
// Golden pictures: every row of tests/data/golden/visualize/MANIFEST.

struct GoldenCase {
  Shape shape;
  std::vector<int> mesh_sizes;
  std::vector<std::string> axes;
  std::string spec;
  std::string file;
};

std::string golden_visualize_dir() { return golden_dir() + "/visualize"; }

// Rows "shape | mesh shape | mesh axes | spec | file"; '#' starts a comment line.
std::vector<GoldenCase> read_manifest(const std::string& dir) {
  std::vector<GoldenCase> cases;
  for (const std::string& raw : split(read_text(dir + "/MANIFEST"), '\n')) {
    const std::string line = trim(raw);
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> fields = split(line, '|');
    if (fields.size() != 5) {
      ADD_FAILURE() << "MANIFEST row without 5 '|'-separated fields: " << line;
      continue;
    }
    GoldenCase c;
    for (const auto& d : split(trim(fields[0]), ',')) c.shape.push_back(std::stoll(d));
    for (const auto& s : split(trim(fields[1]), 'x')) c.mesh_sizes.push_back(std::stoi(s));
    for (const auto& a : split(trim(fields[2]), ',')) c.axes.push_back(trim(a));
    c.spec = trim(fields[3]);
    c.file = trim(fields[4]);
    cases.push_back(c);
  }
  return cases;
}

class GoldenTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = golden_visualize_dir();
    ASSERT_TRUE(std::ifstream(dir_ + "/MANIFEST")) << dir_ << "/MANIFEST is missing (tests/data/golden)";
    cases_ = read_manifest(dir_);
    ASSERT_FALSE(cases_.empty()) << "no rows in " << dir_ << "/MANIFEST";
  }

  Sharding sharding_of(const GoldenCase& c) const {
    return NamedSharding(Mesh(c.mesh_sizes, c.axes), PartitionSpec::parse(c.spec));
  }

  std::string dir_;
  std::vector<GoldenCase> cases_;
};

TEST_F(GoldenTest, ColourOutputWithoutCodesMatchesJax) {
  for (const GoldenCase& c : cases_) {
    SCOPED_TRACE(c.file + ": " + c.spec);
    const std::string out = meshvk::visualize_sharding(c.shape, sharding_of(c), colour());
    EXPECT_EQ(trimmed_lines(strip_ansi(out)), trimmed_lines(read_text(dir_ + "/" + c.file)));
  }
}

// Without colour JAX draws boxes (rich.box.SQUARE) with rules between rows and one column less
// of padding on each side, so it cannot equal the colour golden; it must hold the same cells in
// the same places.
TEST_F(GoldenTest, PlainOutputHasTheSameCellsInBoxes) {
  for (const GoldenCase& c : cases_) {
    SCOPED_TRACE(c.file + ": " + c.spec);
    const std::string out = meshvk::visualize_sharding(c.shape, sharding_of(c), plain());
    EXPECT_EQ(out.find('\x1b'), std::string::npos) << "plain output carries escape codes";
    const std::vector<std::string> lines = split(out, '\n');
    ASSERT_GE(lines.size(), 3u);
    EXPECT_EQ(lines.front().rfind("\u250c", 0), 0u) << lines.front();
    EXPECT_EQ(lines.back().rfind("\u2514", 0), 0u) << lines.back();
    for (const std::string& line : lines) EXPECT_EQ(columns(line), columns(lines.front())) << line;
    EXPECT_EQ(labels(out), labels(read_text(dir_ + "/" + c.file)));
  }
}

// ---------------------------------------------------------------------------------------------
// visualize_sharding beyond the goldens

TEST(Visualize, ColoursAreTab20bInJaxOrder) {
  // 8 cells: make_color_iter walks linspace(0, 1, 8) with stride 8 / 2 + 1 = 5, so the cells
  // row-major take values 0, 5/7, 2/7, 1, 4/7, 1/7, 6/7, 3/7, i.e. tab20b entries
  // 0, 14, 5, 19, 11, 2, 17, 8.
  const std::string out =
      meshvk::visualize_sharding({8192, 8192}, named(mesh_4x2(), P("a", "b")), colour());
  const std::vector<std::string> expected = {"393B79", "D6616B", "8CA252", "DE9ED6",
                                             "E7CB94", "6B6ECF", "A55194", "8C6D31"};
  EXPECT_EQ(backgrounds(out), expected);
}

TEST(Visualize, TextIsBlackOnLightCellsAndWhiteOnDarkOnes) {
  const std::string out =
      meshvk::visualize_sharding({8192, 8192}, named(mesh_4x2(), P("a", "b")), colour());
  const std::set<std::string> s = styles(out);
  // #E7CB94 weighs 231 * 0.299 + 203 * 0.587 + 148 * 0.114 = 205.1 > 186: black text.
  EXPECT_TRUE(s.count("38;2;0;0;0;48;2;231;203;148")) << "light cell without black text";
  // #DE9ED6 weighs 183.5 <= 186: white text.
  EXPECT_TRUE(s.count("38;2;255;255;255;48;2;222;158;214")) << "dark cell without white text";
  EXPECT_TRUE(s.count("38;2;255;255;255;48;2;57;59;121"));
  EXPECT_EQ(s.size(), 8u);
}

TEST(Visualize, ColourCodesWrapEverySegment) {
  const std::string out =
      meshvk::visualize_sharding({8192, 8192}, named(mesh_4x2(), P("a", "b")), colour());
  // The label sits in its own segment, between the cell's left and right padding.
  EXPECT_NE(out.find("\x1b[38;2;255;255;255;48;2;57;59;121m   \x1b[0m"
                     "\x1b[38;2;255;255;255;48;2;57;59;121mCPU 0\x1b[0m"
                     "\x1b[38;2;255;255;255;48;2;57;59;121m    \x1b[0m"),
            std::string::npos)
      << out;
  for (const std::string& line : split(out, '\n')) {
    EXPECT_EQ(line.rfind("\x1b[38;2;", 0), 0u) << "line not coloured from its start";
    EXPECT_EQ(line.size() - line.rfind("\x1b[0m"), 4u) << "line does not end with a reset";
  }
}

TEST(Visualize, PlainSquareBoxAsJaxDrawsIt) {
  const std::string out =
      meshvk::visualize_sharding({8192, 8192}, named(mesh_4x2(), P("a", "b")), plain());
  const std::vector<std::string> expected = {
      "┌──────────┬──────────┐",  //
      "│  CPU 0   │  CPU 1   │",  //
      "├──────────┼──────────┤",  //
      "│  CPU 2   │  CPU 3   │",  //
      "├──────────┼──────────┤",  //
      "│  CPU 4   │  CPU 5   │",  //
      "├──────────┼──────────┤",  //
      "│  CPU 6   │  CPU 7   │",  //
      "└──────────┴──────────┘",
  };
  EXPECT_EQ(trimmed_lines(out), expected);
}

TEST(Visualize, OutputEndsWithOneNewline) {
  const std::string out =
      meshvk::visualize_sharding({8}, named(Mesh({2, 4}, {"x", "y"}), P("y")), colour());
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');
  EXPECT_NE(out[out.size() - 2], '\n');
}

TEST(Visualize, GpuPlatformLabelsCellsGpu) {
  const Mesh mesh({4, 2}, {"a", "b"}, {}, {}, "GPU");
  const std::string out = meshvk::visualize_sharding({16, 16}, named(mesh, P("a")), plain());
  EXPECT_EQ(labels(out), (std::vector<std::string>{"GPU 0,1", "GPU 2,3", "GPU 4,5", "GPU 6,7"}));
}

TEST(Visualize, SingleDeviceShardingIsOneCell) {
  const std::string out =
      meshvk::visualize_sharding({8192, 8192}, SingleDeviceSharding(3), colour());
  EXPECT_EQ(labels(out), std::vector<std::string>{"CPU 3"});
}

TEST(Visualize, RankZeroIsOneCellOfEveryDevice) {
  const std::string out = meshvk::visualize_sharding({}, named(mesh_4x2(), P()), plain());
  const std::vector<std::string> lines = trimmed_lines(out);
  ASSERT_EQ(lines.size(), 3u) << out;
  EXPECT_EQ(labels(out), std::vector<std::string>{"CPU 0,1,2,3,4,5,6,7"});
  EXPECT_EQ(labels(meshvk::visualize_sharding({}, SingleDeviceSharding(0), colour())),
            std::vector<std::string>{"CPU 0"});
}

TEST(Visualize, RankThreeDrawsOnePicturePerLeadingSlice) {
  const Mesh mesh({2, 2, 2}, {"a", "b", "c"});
  const std::string out =
      meshvk::visualize_sharding({4, 64, 64}, named(mesh, P("a", "b", "c")), plain());
  const std::vector<std::string> lines = trimmed_lines(out);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.front(), "[0:2, :, :]");
  const auto second = std::find(lines.begin(), lines.end(), "[2:4, :, :]");
  ASSERT_NE(second, lines.end()) << out;
  const std::string first_picture = out.substr(0, out.find("[2:4, :, :]"));
  const std::string second_picture = out.substr(out.find("[2:4, :, :]"));
  EXPECT_EQ(labels(first_picture), (std::vector<std::string>{"CPU 0", "CPU 1", "CPU 2", "CPU 3"}));
  EXPECT_EQ(labels(second_picture), (std::vector<std::string>{"CPU 4", "CPU 5", "CPU 6", "CPU 7"}));
  // Each picture is the 2-D picture of its slice: the (64, 64) slice split 2 x 2.
  EXPECT_EQ(std::string(second_picture.substr(second_picture.find('\n') + 1)),
            meshvk::visualize_sharding(
                {64, 64}, NamedSharding(Mesh({2, 2}, {"b", "c"}, {}, {4, 5, 6, 7}), P("b", "c")),
                plain()));
}

TEST(Visualize, RankThreeWithUnsplitLeadingDimensionIsOnePicture) {
  const Mesh mesh({2, 2, 2}, {"a", "b", "c"});
  const std::string out =
      meshvk::visualize_sharding({4, 64, 64}, named(mesh, P(None, "b", "c")), colour());
  EXPECT_EQ(trimmed_lines(out).front(), "[:, :, :]");
  EXPECT_EQ(labels(out), (std::vector<std::string>{"CPU 0,4", "CPU 1,5", "CPU 2,6", "CPU 3,7"}));
}

TEST(Visualize, WideTablesShrinkToMaxWidth) {
  const std::string out =
      meshvk::visualize_sharding({64}, named(Mesh({16}, {"x"}), P("x")), plain());
  for (const std::string& line : split(out, '\n')) EXPECT_LE(columns(line), 80u) << line;
  VisualizeOptions narrow = colour();
  narrow.max_width = 30;
  const std::string coloured =
      meshvk::visualize_sharding({8, 8192}, named(mesh_4x2(), P(None, "a")), narrow);
  for (const std::string& line : split(strip_ansi(coloured), '\n'))
    EXPECT_LE(columns(line), 30u) << line;
}

TEST(Visualize, ScaleChangesTheHeight) {
  VisualizeOptions big = colour();
  big.scale = 2.0;
  const Sharding s = SingleDeviceSharding(0);
  auto line_count = [](const std::string& text) {
    return std::count(text.begin(), text.end(), '\n');
  };
  // base_height = int(10 * scale): 10 + 1 lines at scale 1, 20 + 1 at scale 2.
  EXPECT_EQ(line_count(meshvk::visualize_sharding({8, 8}, s, colour())), 11);
  EXPECT_EQ(line_count(meshvk::visualize_sharding({8, 8}, s, big)), 21);
}

TEST(Visualize, RejectsBadOptionsAndShapes) {
  const Sharding s = named(mesh_4x2(), P("a"));
  VisualizeOptions o = plain();
  o.scale = -1;
  EXPECT_NE(error_of([&] {
              meshvk::visualize_sharding({8, 8}, s, o);
            }).find("scale"),
            std::string::npos);
  o = plain();
  o.max_width = 0;
  EXPECT_NE(error_of([&] {
              meshvk::visualize_sharding({8, 8}, s, o);
            }).find("max_width"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              meshvk::visualize_sharding({6, 8}, s, plain());
            }).find("divisible"),
            std::string::npos);
}

// Issue 31.7.1: `meshvk visualize --shape 8192,8192 --mesh 4096 --spec "P(None,'x')"
// --min-width 10000 --max-width 10000 --scale 100` took 0.94 GB and printed 164 MB. A picture
// over kVisualizeMaxCharacters is refused before it is drawn, naming its size, the limit and
// the options that shrink it.
TEST(Visualize, RefusesAPictureOverTheCharacterLimit) {
  VisualizeOptions huge = plain();
  huge.min_width = 10000;
  huge.max_width = 10000;
  huge.scale = 100;
  const Sharding wide = named(Mesh({4096}, {"x"}), P(None, "x"));
  const auto start = std::chrono::steady_clock::now();
  const std::string message = error_of([&] {
    meshvk::visualize_sharding({8192, 8192}, wide, huge);
  });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
  for (const std::string& part :
       {std::string("visualize_sharding: the picture would be "), std::string(" lines of "),
        std::to_string(meshvk::kVisualizeMaxCharacters), std::string("scale (now 100)"),
        std::string("max_width (now 10000)"), std::string("min_width (now 10000)")})
    EXPECT_NE(message.find(part), std::string::npos) << part << " in: " << message;
  huge.use_color = true;
  EXPECT_NE(error_of([&] {
              meshvk::visualize_sharding({8192, 8192}, wide, huge);
            }).find("kVisualizeMaxCharacters"),
            std::string::npos);

  // A square picture 10000 lines high at the default width fits (scale 1000 stays usable) ...
  VisualizeOptions tall = plain();
  tall.scale = 1000;
  const std::string picture =
      meshvk::visualize_sharding({8, 8}, named(mesh_4x2(), P("a", "b")), tall);
  EXPECT_GT(std::count(picture.begin(), picture.end(), '\n'), 9000);
  EXPECT_LE(static_cast<int64_t>(columns(picture)), meshvk::kVisualizeMaxCharacters);
  // ... but not as wide as 10000 columns.
  tall.max_width = 10000;
  tall.min_width = 10000;
  EXPECT_NE(error_of([&] {
              meshvk::visualize_sharding({8, 8}, named(mesh_4x2(), P("a", "b")), tall);
            }).find("lines of"),
            std::string::npos);
}

// The slices of a rank 3+ array share one limit: each fits alone, all of them together do not.
TEST(Visualize, CharacterLimitCoversEverySliceOfARankThreeArray) {
  VisualizeOptions options = plain();
  options.scale = 40;  // 401 lines of 80 columns per slice: 32 KB
  const Mesh mesh({64}, {"a"});
  EXPECT_NO_THROW(meshvk::visualize_sharding({8, 8}, SingleDeviceSharding(0), options));
  const std::string message = error_of([&] {
    meshvk::visualize_sharding({64, 8, 8}, named(mesh, P("a")), options);
  });
  EXPECT_NE(message.find("slice pictures before it"), std::string::npos) << message;
}

// The size measured before drawing (what the limit is checked against) is the size drawn: as
// many lines, and as wide as the widest line unless the console cropped it.
TEST(Visualize, MeasuredTableSizeIsTheDrawnSize) {
  std::mt19937 random(31);
  const auto pick = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(random);
  };
  for (int trial = 0; trial < 2000; ++trial) {
    const int rows = pick(1, 4), cols = pick(1, 6);
    std::vector<std::vector<meshvk::detail::RichCell>> table(rows);
    for (auto& row : table) {
      for (int c = 0; c < cols; ++c) {
        meshvk::detail::RichCell cell;
        cell.text =
            pick(0, 1) ? "CPU " + std::to_string(pick(0, 4095)) : "GPU 0,1,2,3,4,5,6,7,8,9,10,11";
        cell.top = pick(0, 6);
        cell.bottom = pick(0, 6);
        cell.left = pick(0, 12);
        cell.right = pick(0, 12);
        if (pick(0, 1)) cell.sgr = "38;2;255;255;255;48;2;57;59;121";
        row.push_back(cell);
      }
    }
    const meshvk::detail::RichTableOptions options{.boxed = pick(0, 1) == 1,
                                                   .console_width = pick(1, 120)};
    const meshvk::detail::RichTableSize size = meshvk::detail::measure_rich_table(table, options);
    const std::vector<std::string> drawn = meshvk::detail::render_rich_table(table, options);
    ASSERT_EQ(size.lines, static_cast<int64_t>(drawn.size())) << "trial " << trial;
    size_t widest = 0;
    for (const std::string& line : drawn) widest = std::max(widest, columns(strip_ansi(line)));
    EXPECT_EQ(static_cast<int64_t>(widest), std::min<int64_t>(size.width, options.console_width))
        << "trial " << trial;
  }
}

// ---------------------------------------------------------------------------------------------
// Shard index math, as jax.sharding.NamedSharding.devices_indices_map computes it. Devices of a
// (4, 2) mesh sit row-major: device d is at a = d / 2, b = d % 2.

TEST(ShardingIndices, NoneReplicatesEveryDimension) {
  const Sharding s = named(mesh_4x2(), P());
  for (const auto& piece : pieces(s, {8, 4}))
    EXPECT_EQ(piece.substr(piece.find('>') + 1), "[0:8, 0:4]");
  EXPECT_EQ(named(mesh_4x2(), P(None, None)), s);
}

TEST(ShardingIndices, SingleAxisSplitsOneDimension) {
  EXPECT_EQ(pieces(named(mesh_4x2(), P("a")), {8, 4}),
            (std::vector<std::string>{"0->[0:2, 0:4]", "1->[0:2, 0:4]", "2->[2:4, 0:4]",
                                      "3->[2:4, 0:4]", "4->[4:6, 0:4]", "5->[4:6, 0:4]",
                                      "6->[6:8, 0:4]", "7->[6:8, 0:4]"}));
}

TEST(ShardingIndices, TwoAxesSplitTwoDimensions) {
  EXPECT_EQ(pieces(named(mesh_4x2(), P("a", "b")), {8, 4}),
            (std::vector<std::string>{"0->[0:2, 0:2]", "1->[0:2, 2:4]", "2->[2:4, 0:2]",
                                      "3->[2:4, 2:4]", "4->[4:6, 0:2]", "5->[4:6, 2:4]",
                                      "6->[6:8, 0:2]", "7->[6:8, 2:4]"}));
}

TEST(ShardingIndices, ReversedAxesSplitRowsByTheSecondAxis) {
  EXPECT_EQ(pieces(named(mesh_4x2(), P("b", "a")), {8, 4}),
            (std::vector<std::string>{"0->[0:4, 0:1]", "1->[4:8, 0:1]", "2->[0:4, 1:2]",
                                      "3->[4:8, 1:2]", "4->[0:4, 2:3]", "5->[4:8, 2:3]",
                                      "6->[0:4, 3:4]", "7->[4:8, 3:4]"}));
}

TEST(ShardingIndices, TupleAxesSplitMajorFirst) {
  // ('a', 'b'): piece a * 2 + b of 8.
  EXPECT_EQ(pieces(named(mesh_4x2(), P({"a", "b"}, None)), {8, 4}),
            (std::vector<std::string>{"0->[0:1, 0:4]", "1->[1:2, 0:4]", "2->[2:3, 0:4]",
                                      "3->[3:4, 0:4]", "4->[4:5, 0:4]", "5->[5:6, 0:4]",
                                      "6->[6:7, 0:4]", "7->[7:8, 0:4]"}));
  // ('b', 'a'): piece b * 4 + a of 8.
  EXPECT_EQ(pieces(named(mesh_4x2(), P({"b", "a"})), {8}),
            (std::vector<std::string>{"0->[0:1]", "1->[4:5]", "2->[1:2]", "3->[5:6]", "4->[2:3]",
                                      "5->[6:7]", "6->[3:4]", "7->[7:8]"}));
}

TEST(ShardingIndices, PartiallyReplicatedAlongTheUnusedAxis) {
  const NamedSharding n(mesh_4x2(), P(None, "b"));
  EXPECT_EQ(n.replicated_axes(), std::vector<std::string>{"a"});
  EXPECT_EQ(pieces(n, {8, 4}),
            (std::vector<std::string>{"0->[0:8, 0:2]", "1->[0:8, 2:4]", "2->[0:8, 0:2]",
                                      "3->[0:8, 2:4]", "4->[0:8, 0:2]", "5->[0:8, 2:4]",
                                      "6->[0:8, 0:2]", "7->[0:8, 2:4]"}));
  EXPECT_FALSE(Sharding(n).is_fully_replicated());
}

TEST(ShardingIndices, OneAxisMesh) {
  const Sharding s = named(Mesh({8}, {"x"}), P("x"));
  std::vector<std::string> expected;
  for (int d = 0; d < 8; ++d)
    expected.push_back(std::to_string(d) + "->[" + std::to_string(2 * d) + ":" +
                       std::to_string(2 * d + 2) + "]");
  EXPECT_EQ(pieces(s, {16}), expected);
  EXPECT_EQ(s.shard_shape({16}), (Shape{2}));
}

TEST(ShardingIndices, ThreeAxisMesh) {
  // Device d sits at x = d / 4, y = d / 2 % 2, z = d % 2; rows split by x * 2 + z, columns by y.
  const NamedSharding n(Mesh({2, 2, 2}, {"x", "y", "z"}), P({"x", "z"}, "y"));
  EXPECT_EQ(n.num_shards(0), 4);
  EXPECT_EQ(n.num_shards(1), 2);
  EXPECT_EQ(pieces(n, {8, 4}),
            (std::vector<std::string>{"0->[0:2, 0:2]", "1->[2:4, 0:2]", "2->[0:2, 2:4]",
                                      "3->[2:4, 2:4]", "4->[4:6, 0:2]", "5->[6:8, 0:2]",
                                      "6->[4:6, 2:4]", "7->[6:8, 2:4]"}));
  EXPECT_EQ(n.shard_coord(5, 0), 3);
  EXPECT_EQ(n.shard_coord(5, 1), 0);
}

TEST(ShardingIndices, MapFollowsTheMeshDeviceOrder) {
  const Mesh mesh({2, 2}, {"a", "b"}, {}, {3, 2, 1, 0});
  const auto map = Sharding(NamedSharding(mesh, P("a"))).devices_indices_map({4});
  ASSERT_EQ(map.size(), 4u);
  EXPECT_EQ(map[0].device, 3);
  EXPECT_EQ(map[0].index, (Index{{0, 2}}));
  EXPECT_EQ(map[3].device, 0);
  EXPECT_EQ(map[3].index, (Index{{2, 4}}));
  EXPECT_EQ(Sharding(NamedSharding(mesh, P())).device_ids(), (std::vector<int>{3, 2, 1, 0}));
}

TEST(ShardingIndices, SingleDeviceHoldsEverything) {
  const Sharding s = SingleDeviceSharding(5);
  EXPECT_EQ(pieces(s, {8, 4}), std::vector<std::string>{"5->[0:8, 0:4]"});
  EXPECT_EQ(s.shard_shape({8, 4}), (Shape{8, 4}));
  EXPECT_EQ(s.device_ids(), std::vector<int>{5});
  EXPECT_TRUE(s.is_fully_replicated());
}

TEST(ShardingIndices, RankZeroHasEmptyIndices) {
  const auto map = named(mesh_4x2(), P()).devices_indices_map({});
  ASSERT_EQ(map.size(), 8u);
  for (const auto& entry : map) EXPECT_TRUE(entry.index.empty());
}

TEST(ShardingModel, ShardShape) {
  EXPECT_EQ(named(mesh_4x2(), P("a", "b")).shard_shape({8, 4}), (Shape{2, 2}));
  EXPECT_EQ(named(mesh_4x2(), P({"a", "b"})).shard_shape({8, 4}), (Shape{1, 4}));
  EXPECT_EQ(named(mesh_4x2(), P()).shard_shape({8, 4}), (Shape{8, 4}));
  EXPECT_EQ(named(mesh_4x2(), P(None, "a")).shard_shape({3, 8, 5}), (Shape{3, 2, 5}));
}

TEST(ShardingModel, IsFullyReplicated) {
  EXPECT_TRUE(named(mesh_4x2(), P()).is_fully_replicated());
  EXPECT_TRUE(named(mesh_4x2(), P(None, None)).is_fully_replicated());
  EXPECT_FALSE(named(mesh_4x2(), P("a")).is_fully_replicated());
  EXPECT_FALSE(named(mesh_4x2(), P(None, "b")).is_fully_replicated());
  // Splitting by an axis of size 1 splits nothing.
  EXPECT_TRUE(named(Mesh({1, 8}, {"one", "x"}), P("one")).is_fully_replicated());
  EXPECT_TRUE(Sharding(SingleDeviceSharding(0)).is_fully_replicated());
}

TEST(ShardingModel, TrailingNoneIsEqual) {
  EXPECT_EQ(P("a"), P("a", None));
  EXPECT_EQ(P(), P(None, None));
  EXPECT_NE(P("a"), P("b"));
  EXPECT_NE(P("a"), P(None, "a"));
  EXPECT_NE(P({"a", "b"}), P({"b", "a"}));
  EXPECT_EQ(named(mesh_4x2(), P("a")), named(mesh_4x2(), P("a", None)));
  EXPECT_NE(named(mesh_4x2(), P("a")), named(Mesh({4, 2}, {"a", "c"}), P("a")));
  EXPECT_NE(named(mesh_4x2(), P("a")), Sharding(SingleDeviceSharding(0)));
}

TEST(ShardingModel, EquivalenceComparesPieces) {
  EXPECT_TRUE(named(mesh_4x2(), P("a")).is_equivalent_to(named(mesh_4x2(), P("a", None)), 2));
  // An axis of size 1 changes nothing.
  const Mesh with_one({4, 1, 2}, {"a", "one", "b"});
  EXPECT_TRUE(
      named(with_one, P("a", "b")).is_equivalent_to(named(with_one, P({"a", "one"}, "b")), 2));
  EXPECT_FALSE(named(mesh_4x2(), P({"a", "b"})).is_equivalent_to(named(mesh_4x2(), P("a")), 1));
  EXPECT_FALSE(named(mesh_4x2(), P("a")).is_equivalent_to(named(mesh_4x2(), P("b")), 1));
}

// ---------------------------------------------------------------------------------------------
// Printing, exactly as JAX prints the same objects.

TEST(ShardingPrinting, Mesh) {
  EXPECT_EQ(Mesh({2, 4}, {"x", "y"}).to_string(), "Mesh('x': 2, 'y': 4, axis_types=(Auto, Auto))");
  EXPECT_EQ(Mesh({8}, {"x"}).to_string(), "Mesh('x': 8, axis_types=(Auto,))");
  EXPECT_EQ(
      Mesh({2, 2}, {"a", "b"}, {meshvk::AxisType::Explicit, meshvk::AxisType::Manual}).to_string(),
      "Mesh('a': 2, 'b': 2, axis_types=(Explicit, Manual))");
}

TEST(ShardingPrinting, PartitionSpec) {
  EXPECT_EQ(P().to_string(), "PartitionSpec()");
  EXPECT_EQ(P("a").to_string(), "PartitionSpec('a',)");
  EXPECT_EQ(P("a", None).to_string(), "PartitionSpec('a', None)");
  EXPECT_EQ(P(None, "b").to_string(), "PartitionSpec(None, 'b')");
  EXPECT_EQ(P({"a", "b"}, None).to_string(), "PartitionSpec(('a', 'b'), None)");
  EXPECT_EQ(P({"a"}).to_string(), "PartitionSpec(('a',),)");
}

TEST(ShardingPrinting, NamedSharding) {
  EXPECT_EQ(NamedSharding(Mesh({2, 4}, {"x", "y"}), P("x", "y")).to_string(),
            "NamedSharding(mesh=Mesh('x': 2, 'y': 4, axis_types=(Auto, Auto)), "
            "spec=PartitionSpec('x', 'y'), memory_kind=unpinned_host)");
  EXPECT_EQ(Sharding(NamedSharding(Mesh({8}, {"d"}, {}, {}, "GPU"), P())).to_string(),
            "NamedSharding(mesh=Mesh('d': 8, axis_types=(Auto,)), spec=PartitionSpec(), "
            "memory_kind=device)");
}

TEST(ShardingPrinting, SingleDeviceShardingAndIndices) {
  EXPECT_EQ(SingleDeviceSharding(0).to_string(),
            "SingleDeviceSharding(device=CpuDevice(id=0), memory_kind=unpinned_host)");
  EXPECT_EQ(SingleDeviceSharding(2, "GPU").to_string(),
            "SingleDeviceSharding(device=GpuDevice(id=2), memory_kind=device)");
  EXPECT_EQ(meshvk::index_to_string({{0, 4}, {2, 4}}), "[0:4, 2:4]");
  EXPECT_EQ(meshvk::shape_to_string({4, 8}), "(4, 8)");
  EXPECT_EQ(meshvk::shape_to_string({32}), "(32,)");
  EXPECT_EQ(meshvk::shape_to_string({}), "()");
}

// ---------------------------------------------------------------------------------------------
// PartitionSpec::parse

TEST(PartitionSpecParse, RoundTripsWhatItPrints) {
  for (const char* text : {"PartitionSpec()", "PartitionSpec('a',)", "PartitionSpec('a', None)",
                           "PartitionSpec(None, 'b')", "PartitionSpec(('a', 'b'), None)",
                           "PartitionSpec(('a',),)", "PartitionSpec('batch', ('x', 'y'), None)"}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(PartitionSpec::parse(text).to_string(), text);
    EXPECT_EQ(PartitionSpec::parse(PartitionSpec::parse(text).to_string()),
              PartitionSpec::parse(text));
  }
}

TEST(PartitionSpecParse, AcceptsJaxSpellings) {
  EXPECT_EQ(PartitionSpec::parse("P('a', 'b')"), P("a", "b"));
  EXPECT_EQ(PartitionSpec::parse("P()"), P());
  EXPECT_EQ(PartitionSpec::parse("P(('a', 'b'), None)"), P({"a", "b"}, None));
  EXPECT_EQ(PartitionSpec::parse("jax.sharding.PartitionSpec(\"x\")"), P("x"));
  EXPECT_EQ(PartitionSpec::parse("  P( 'a' ,None , )  "), P("a", None));
  EXPECT_EQ(PartitionSpec::parse("P('a',)").size(), 1u);
  EXPECT_EQ(PartitionSpec::parse("P('a', None)").size(), 2u);
}

TEST(PartitionSpecParse, RejectsMalformedText) {
  for (const char* text : {"P('a'", "P(a)", "P('a' 'b')", "P('')", "P(('a', 'b')", "P('a') extra",
                           "P(,)", "P('unterminated)"}) {
    SCOPED_TRACE(text);
    const std::string message = error_of([&] { PartitionSpec::parse(text); });
    EXPECT_NE(message.find("cannot parse PartitionSpec"), std::string::npos) << message;
    EXPECT_NE(message.find("valid forms are"), std::string::npos) << message;
  }
}

TEST(PartitionSpecParse, ShorthandRejectsAGap) {
  const std::string message = error_of([] { P("a", meshvk::SpecArg(), "b"); });
  EXPECT_NE(message.find("None"), std::string::npos) << message;
}

// ---------------------------------------------------------------------------------------------
// Errors: each names what was wrong and what would be valid.

TEST(ShardingErrors, UnknownAxis) {
  const std::string message = error_of([] { NamedSharding(mesh_4x2(), P("c")); });
  EXPECT_NE(message.find("'c'"), std::string::npos) << message;
  EXPECT_NE(message.find("'a', 'b'"), std::string::npos) << message;
}

TEST(ShardingErrors, AxisUsedTwice) {
  for (const PartitionSpec& spec : {P("a", "a"), P({"a", "a"}), P({"a", "b"}, "b")}) {
    SCOPED_TRACE(spec.to_string());
    const std::string message = error_of([&] { NamedSharding(mesh_4x2(), spec); });
    EXPECT_NE(message.find("more than once"), std::string::npos) << message;
  }
}

TEST(ShardingErrors, SpecLongerThanRank) {
  const Sharding s = named(mesh_4x2(), P("a", "b"));
  const std::string message = error_of([&] { s.devices_indices_map({8}); });
  EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
  EXPECT_NE(message.find("2 entries"), std::string::npos) << message;
  EXPECT_NE(error_of([&] { s.shard_shape({8}); }), "");
}

TEST(ShardingErrors, DimensionNotDivisible) {
  const Sharding s = named(mesh_4x2(), P(None, {"a", "b"}));
  const std::string message = error_of([&] { s.check_shape({4, 12}); });
  EXPECT_NE(message.find("dimension 1"), std::string::npos) << message;
  EXPECT_NE(message.find("size 12"), std::string::npos) << message;
  EXPECT_NE(message.find("divisible by 8"), std::string::npos) << message;
  EXPECT_NE(message.find("product of mesh axes ('a', 'b')"), std::string::npos) << message;
}

TEST(ShardingErrors, NegativeDimension) {
  const std::string message = error_of([] {
    named(mesh_4x2(), P("a")).devices_indices_map({-8, 4});
  });
  EXPECT_NE(message.find("dimension 0"), std::string::npos) << message;
}

TEST(ShardingErrors, BadMeshes) {
  EXPECT_NE(error_of([] { Mesh({2, 2}, {"a"}); }).find("one name per axis"), std::string::npos);
  EXPECT_NE(error_of([] { Mesh({2, 2}, {"a", "a"}); }).find("appears twice"), std::string::npos);
  EXPECT_NE(error_of([] { Mesh({0}, {"a"}); }).find("at least 1"), std::string::npos);
  EXPECT_NE(error_of([] {
              Mesh({2}, {"a"}, {}, {0, 1, 2});
            }).find("device ids"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Mesh({2}, {"a"}, {}, {1, 1});
            }).find("appears twice"),
            std::string::npos);
  EXPECT_NE(error_of([] { mesh_4x2().axis_position("z"); }).find("'z'"), std::string::npos);
}

}  // namespace
