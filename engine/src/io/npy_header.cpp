// The .npy preamble and header (numpy/lib/format.py): a magic string, a version, a little-endian
// header length, then a Python dict literal describing the array. The literal is parsed the way
// ast.literal_eval would for the subset numpy writes, then validated as numpy validates it.
// Everything read from the file is bounds-checked: a malformed file raises meshvk::Error saying
// what is wrong and what would be valid, never anything else.
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/element_count.hpp"
#include "io/npy_format.hpp"
#include "meshvk/error.hpp"

namespace meshvk::io::npy {

void fail_load(const std::string& what, const std::string& message) {
  throw Error("load_npy(" + what + "): " + message);
}

std::string excerpt(std::string_view text, size_t max_len) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < max_len; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
    }
  }
  if (text.size() > max_len) out += "...";
  return out;
}

uint64_t read_uint(const std::byte* p, size_t size, bool big_endian) {
  uint64_t value = 0;
  for (size_t i = 0; i < size; ++i) {
    const size_t shift = 8 * (big_endian ? size - 1 - i : i);
    value |= static_cast<uint64_t>(std::to_integer<uint8_t>(p[i])) << shift;
  }
  return value;
}

namespace {

// numpy.lib.format's _MAX_HEADER_SIZE: the longest header numpy.load parses by default.
constexpr size_t kMaxHeaderLen = 10000;
// Python literals in a real header nest two deep; this bounds recursion on hostile input.
constexpr int kMaxLiteralDepth = 16;
constexpr std::string_view kExpectedHeader =
    "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 8), }";

// ---------------------------------------------------------------------------------------------
// The header: a Python literal, parsed the way ast.literal_eval would for the subset numpy
// writes (dicts, tuples, lists, strings, integers, True/False/None), so that key order, spacing,
// quote style and trailing commas do not matter.

struct Literal {
  enum class Kind { string, integer, number, boolean, none, tuple, list, dict };
  Kind kind = Kind::none;
  std::string_view source;     // the literal's text in the header, for error messages
  std::string text;            // a string's value; an integer's digits (sign in `negative`)
  bool negative = false;       // integers only
  bool boolean = false;        // booleans only
  std::vector<Literal> items;  // tuple/list elements; for a dict: key, value, key, value, ...
};

std::string_view kind_name(Literal::Kind kind) {
  switch (kind) {
    case Literal::Kind::string:
      return "a string";
    case Literal::Kind::integer:
      return "an integer";
    case Literal::Kind::number:
      return "a number";
    case Literal::Kind::boolean:
      return "a bool";
    case Literal::Kind::none:
      return "None";
    case Literal::Kind::tuple:
      return "a tuple";
    case Literal::Kind::list:
      return "a list";
    case Literal::Kind::dict:
      return "a dict";
  }
  return "a value";
}

class LiteralParser {
 public:
  LiteralParser(std::string_view text, const std::string& what) : text_(text), what_(what) {}

  // The header's single literal; only whitespace (numpy's padding) may follow it.
  Literal parse_document() {
    Literal value = parse_value(0);
    skip_space();
    if (pos_ != text_.size()) syntax_error("the end of the header after the dict");
    return value;
  }

 private:
  Literal parse_value(int depth) {
    if (depth > kMaxLiteralDepth) {
      fail_load(what_, "the header nests deeper than " + std::to_string(kMaxLiteralDepth) +
                           " levels; expected a flat dict such as " + std::string(kExpectedHeader));
    }
    skip_space();
    if (pos_ == text_.size()) syntax_error("a value");
    const char c = text_[pos_];
    if (c == '\'' || c == '"') return parse_string();
    if (c == '{') return parse_dict(depth);
    if (c == '(') return parse_sequence('(', ')', Literal::Kind::tuple, depth);
    if (c == '[') return parse_sequence('[', ']', Literal::Kind::list, depth);
    if (c == '-' || c == '+' || c == '.' || is_digit(c)) return parse_number();
    if (is_name_char(c)) return parse_name();
    syntax_error("a value");
  }

  Literal parse_string() {
    const size_t start = pos_;
    const char quote = text_[pos_++];
    Literal literal;
    literal.kind = Literal::Kind::string;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\n') syntax_error("the closing quote of the string");
      if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) ++pos_;  // \' \" \\ keep the next char
      literal.text += text_[pos_++];
    }
    if (pos_ == text_.size()) syntax_error("the closing quote of the string");
    ++pos_;
    literal.source = text_.substr(start, pos_ - start);
    return literal;
  }

  // Integers ("32", "-1", Python 2's "32L") become Kind::integer; any other numeric-looking token
  // ("4.0", "1e3", "0x10") becomes Kind::number so validation can say it is not an integer.
  Literal parse_number() {
    const size_t start = pos_;
    Literal literal;
    literal.kind = Literal::Kind::integer;
    if (text_[pos_] == '-' || text_[pos_] == '+') {
      literal.negative = text_[pos_] == '-';
      ++pos_;
      skip_space();
    }
    const size_t digits_start = pos_;
    while (pos_ < text_.size() && (is_name_char(text_[pos_]) || text_[pos_] == '.' ||
                                   ((text_[pos_] == '-' || text_[pos_] == '+') &&
                                    (text_[pos_ - 1] == 'e' || text_[pos_ - 1] == 'E')))) {
      ++pos_;
    }
    literal.source = text_.substr(start, pos_ - start);
    std::string_view digits = text_.substr(digits_start, pos_ - digits_start);
    if (!digits.empty() && (digits.back() == 'L' || digits.back() == 'l')) {
      digits.remove_suffix(1);
    }
    if (digits.empty()) syntax_error("a number");
    const bool all_digits = std::all_of(digits.begin(), digits.end(), is_digit);
    if (!all_digits) {
      if (!is_digit(digits.front()) && digits.front() != '.') syntax_error("a number");
      literal.kind = Literal::Kind::number;
    }
    literal.text = std::string(digits);
    return literal;
  }

  Literal parse_name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
    const std::string_view name = text_.substr(start, pos_ - start);
    Literal literal;
    literal.source = name;
    if (name == "True" || name == "False") {
      literal.kind = Literal::Kind::boolean;
      literal.boolean = name == "True";
    } else if (name == "None") {
      literal.kind = Literal::Kind::none;
    } else {
      pos_ = start;
      syntax_error("a literal (names such as '" + excerpt(name, 20) + "' are not allowed)");
    }
    return literal;
  }

  // "()" and "(a,)" and "(a, b)" are tuples; "(a)" is just `a` in parentheses, as in Python.
  Literal parse_sequence(char open, char close, Literal::Kind kind, int depth) {
    const size_t start = pos_;
    ++pos_;  // the opening bracket
    Literal literal;
    literal.kind = kind;
    bool saw_comma = false;
    for (;;) {
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == close) break;
      literal.items.push_back(parse_value(depth + 1));
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        saw_comma = true;
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == close) break;
      syntax_error(std::string("',' or '") + close + "'");
    }
    ++pos_;  // the closing bracket
    if (open == '(' && literal.items.size() == 1 && !saw_comma) {
      Literal inner = std::move(literal.items.front());
      inner.source = text_.substr(start, pos_ - start);
      return inner;
    }
    literal.source = text_.substr(start, pos_ - start);
    return literal;
  }

  Literal parse_dict(int depth) {
    const size_t start = pos_;
    ++pos_;  // '{'
    Literal literal;
    literal.kind = Literal::Kind::dict;
    for (;;) {
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == '}') break;
      literal.items.push_back(parse_value(depth + 1));
      skip_space();
      if (pos_ == text_.size() || text_[pos_] != ':') syntax_error("':' after a dict key");
      ++pos_;
      literal.items.push_back(parse_value(depth + 1));
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == '}') break;
      syntax_error("',' or '}' in the dict");
    }
    ++pos_;  // '}'
    literal.source = text_.substr(start, pos_ - start);
    return literal;
  }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  static bool is_name_char(char c) {
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  }

  [[noreturn]] void syntax_error(const std::string& expected) const {
    const std::string found =
        pos_ < text_.size() ? "'" + excerpt(text_.substr(pos_), 20) + "'" : "the end";
    fail_load(what_, "the header is not a valid Python literal: expected " + expected +
                         " at offset " + std::to_string(pos_) + " of the header, found " + found +
                         "; a valid header looks like " + std::string(kExpectedHeader));
  }

  std::string_view text_;
  const std::string& what_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------------------------------------
// The dtype descriptor ('<f4', '>i8', '|b1', ...).

std::optional<Descr> parse_descr(const std::string& text) {
  std::string_view rest = text;
  char order = '=';
  if (!rest.empty() && std::string_view("<>=|").find(rest.front()) != std::string_view::npos) {
    order = rest.front();
    rest.remove_prefix(1);
  }
  struct Known {
    std::string_view code;
    ElementKind kind;
    size_t size;
  };
  static constexpr std::array<Known, 12> kKnown = {{
      {"f2", ElementKind::floating, 2},
      {"f4", ElementKind::floating, 4},
      {"f8", ElementKind::floating, 8},
      {"i1", ElementKind::signed_int, 1},
      {"i2", ElementKind::signed_int, 2},
      {"i4", ElementKind::signed_int, 4},
      {"i8", ElementKind::signed_int, 8},
      {"u1", ElementKind::unsigned_int, 1},
      {"u2", ElementKind::unsigned_int, 2},
      {"u4", ElementKind::unsigned_int, 4},
      {"u8", ElementKind::unsigned_int, 8},
      {"b1", ElementKind::boolean, 1},
  }};
  for (const Known& known : kKnown) {
    if (rest != known.code) continue;
    // '|' means "byte order not applicable", which is only true of single bytes.
    if (order == '|' && known.size != 1) return std::nullopt;
    const bool big = order == '>' || (order == '=' && std::endian::native == std::endian::big);
    return Descr{text, known.kind, known.size, big && known.size > 1};
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Header validation: exactly the keys numpy requires, with the types numpy requires.

// element_bytes: the file's bytes per element ('<f8': 8), bounding the strides in the file.
Shape parse_shape(const Literal& literal, const std::string& what, size_t element_bytes) {
  const std::string expected =
      "; expected a tuple of non-negative integers such as (4, 8), (32,) or ()";
  if (literal.kind != Literal::Kind::tuple) {
    fail_load(what, "'shape' is " + std::string(kind_name(literal.kind)) + " (" +
                        excerpt(literal.source) + "), not a tuple" + expected);
  }
  if (literal.items.size() > kMaxRank) {
    fail_load(what, "'shape' has " + std::to_string(literal.items.size()) +
                        " dimensions; numpy supports at most " + std::to_string(kMaxRank));
  }
  Shape shape;
  for (const Literal& item : literal.items) {
    const std::string entry =
        "'shape' entry " + excerpt(item.source) + " in " + excerpt(literal.source);
    if (item.kind != Literal::Kind::integer) {
      fail_load(what, entry + " is not an integer" + expected);
    }
    if (item.negative && item.text.find_first_not_of('0') != std::string::npos) {
      fail_load(what, entry + " is negative" + expected);
    }
    int64_t dim = 0;
    for (const char digit : item.text) {
      if (__builtin_mul_overflow(dim, int64_t{10}, &dim) ||
          __builtin_add_overflow(dim, int64_t{digit - '0'}, &dim)) {
        fail_load(what, entry + " does not fit in a 64-bit integer" + expected);
      }
    }
    shape.push_back(dim);
  }
  // The element count is not enough: in (0, 2**32, 2**32) it is 0, yet the strides (elements and
  // bytes) multiply the other dimensions. Like numpy ("array is too big"), the product of the
  // non-zero dimensions times the element size must fit, so no stride or offset can overflow:
  // the file's element size and meshvk's 4 bytes, whichever is wider. Not a fixed 8 bytes: that
  // refused float32 files (0, 2**30, 2**30), which numpy and meshvk's save_npy write.
  const int64_t element =
      std::max<int64_t>(static_cast<int64_t>(element_bytes), kLoadedElementBytes);
  int64_t bytes = element;
  for (const int64_t dim : shape) {
    if (dim != 0 && __builtin_mul_overflow(bytes, dim, &bytes)) {
      fail_load(what, "'shape' " + shape_to_string(shape) +
                          " is too big: its non-zero dimensions times " + std::to_string(element) +
                          " bytes exceed 2**63 - 1 bytes (numpy refuses such an array too)");
    }
  }
  return shape;
}

Header interpret_header(const Literal& dict, const std::string& what) {
  const std::string keys_rule =
      "a .npy header has exactly the keys 'descr', 'fortran_order' and 'shape', as in " +
      std::string(kExpectedHeader);
  if (dict.kind != Literal::Kind::dict) {
    fail_load(what, "the header is " + std::string(kind_name(dict.kind)) + " (" +
                        excerpt(dict.source) + "), not a dict; " + keys_rule);
  }
  const Literal* descr = nullptr;
  const Literal* fortran_order = nullptr;
  const Literal* shape = nullptr;
  for (size_t i = 0; i + 1 < dict.items.size(); i += 2) {
    const Literal& key = dict.items[i];
    const Literal* value = &dict.items[i + 1];
    if (key.kind != Literal::Kind::string) {
      fail_load(what, "header key " + excerpt(key.source) + " is not a string; " + keys_rule);
    }
    const Literal** slot = key.text == "descr"           ? &descr
                           : key.text == "fortran_order" ? &fortran_order
                           : key.text == "shape"         ? &shape
                                                         : nullptr;
    if (!slot) {
      fail_load(what, "header has the unexpected key '" + excerpt(key.text) + "'; " + keys_rule);
    }
    if (*slot) fail_load(what, "header repeats the key '" + key.text + "'; " + keys_rule);
    *slot = value;
  }
  for (const auto& [literal, name] :
       {std::pair{descr, "descr"}, std::pair{fortran_order, "fortran_order"},
        std::pair{shape, "shape"}}) {
    if (!literal) fail_load(what, std::string("header lacks the key '") + name + "'; " + keys_rule);
  }

  Header header;
  if (descr->kind != Literal::Kind::string) {
    fail_load(what, "'descr' is " + std::string(kind_name(descr->kind)) + " (" +
                        excerpt(descr->source) +
                        "), not a dtype string; structured dtypes are not supported; supported: " +
                        std::string(kSupportedDescrs));
  }
  const std::optional<Descr> parsed = parse_descr(descr->text);
  if (!parsed) {
    fail_load(what, "unsupported dtype descr '" + excerpt(descr->text) +
                        "'; supported: " + std::string(kSupportedDescrs));
  }
  header.descr = *parsed;
  if (fortran_order->kind != Literal::Kind::boolean) {
    fail_load(what,
              "'fortran_order' is " + excerpt(fortran_order->source) + "; expected True or False");
  }
  header.fortran_order = fortran_order->boolean;
  header.shape = parse_shape(*shape, what, header.descr.size);
  return header;
}

// ---------------------------------------------------------------------------------------------
// The preamble: magic, version, header length.

struct Preamble {
  int major = 0;
  int minor = 0;
  size_t header_offset = 0;
  size_t header_len = 0;
};

Preamble read_preamble(std::span<const std::byte> file, const std::string& what) {
  const size_t magic_seen = std::min(file.size(), kMagic.size());
  for (size_t i = 0; i < magic_seen; ++i) {
    if (std::to_integer<unsigned char>(file[i]) != kMagic[i]) {
      const std::string_view start(reinterpret_cast<const char*>(file.data()),
                                   std::min<size_t>(file.size(), 8));
      fail_load(what, "not a .npy file: it starts with '" + excerpt(start) +
                          "' instead of the magic string '\\x93NUMPY'");
    }
  }
  if (file.size() < kMagicLen + 2) {
    fail_load(what, "truncated: the file is " + std::to_string(file.size()) +
                        " bytes, shorter than the 10-byte .npy preamble (magic '\\x93NUMPY', "
                        "version, header length)");
  }
  Preamble preamble;
  preamble.major = std::to_integer<int>(file[6]);
  preamble.minor = std::to_integer<int>(file[7]);
  if (preamble.minor != 0 || preamble.major < 1 || preamble.major > 3) {
    fail_load(what, "unsupported .npy format version " + std::to_string(preamble.major) + "." +
                        std::to_string(preamble.minor) + "; supported: 1.0, 2.0 and 3.0");
  }
  // Version 1.0 has a 2-byte header length; 2.0 and 3.0 a 4-byte one (3.0 only changes the header
  // encoding to UTF-8, which is the same for the ASCII headers accepted here).
  const size_t length_size = preamble.major == 1 ? 2 : 4;
  if (file.size() < kMagicLen + length_size) {
    fail_load(what, "truncated: version " + std::to_string(preamble.major) + ".0 needs a " +
                        std::to_string(length_size) +
                        "-byte header length at offset 8, but the file is " +
                        std::to_string(file.size()) + " bytes");
  }
  preamble.header_offset = kMagicLen + length_size;
  preamble.header_len = read_uint(file.data() + kMagicLen, length_size, false);
  // numpy's own reader refuses longer headers (max_header_size) as a guard against hostile files;
  // the longest real one (64 dimensions of 21 digits) is under 2000 bytes.
  if (preamble.header_len > kMaxHeaderLen) {
    fail_load(what, "the header length field says " + std::to_string(preamble.header_len) +
                        " bytes; at most " + std::to_string(kMaxHeaderLen) +
                        " are accepted (numpy's max_header_size)");
  }
  const size_t available = file.size() - preamble.header_offset;
  if (preamble.header_len > available) {
    fail_load(what, "truncated header: the header length field says " +
                        std::to_string(preamble.header_len) + " bytes, but only " +
                        std::to_string(available) + " follow the " +
                        std::to_string(preamble.header_offset) + "-byte preamble");
  }
  return preamble;
}

}  // namespace

Layout read_layout(std::span<const std::byte> file, const std::string& what) {
  const Preamble preamble = read_preamble(file, what);
  const std::string_view header_text(
      reinterpret_cast<const char*>(file.data()) + preamble.header_offset, preamble.header_len);
  Layout layout;
  layout.header = interpret_header(LiteralParser(header_text, what).parse_document(), what);
  layout.data_offset = preamble.header_offset + preamble.header_len;
  return layout;
}

}  // namespace meshvk::io::npy
