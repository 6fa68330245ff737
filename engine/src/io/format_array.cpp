// numpy's str() of an array with the default print options (precision 8, floatmode 'maxprec',
// suppress False, linewidth 75, threshold 1000, edgeitems 3, legacy False), following
// numpy/_core/arrayprint.py: array_str -> array2string -> _formatArray, with FloatingFormat and
// IntegerFormat choosing one width for every element, and Dragon4 (numpy's float printer) for the
// digits.
//
// Dragon4 is emulated rather than ported: its "unique" digits are the shortest digits that read
// back as the same float32, which std::to_chars produces; wherever Dragon4 prints past or stops
// short of those digits it rounds the exact binary value half-to-even, which glibc's printf does.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "io/element_count.hpp"
#include "io/host_array.hpp"
#include "meshvk/error.hpp"

namespace meshvk::io {
namespace {

// np.get_printoptions() defaults.
constexpr int kPrecision = 8;
constexpr int64_t kLineWidth = 75;
constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;

// FloatingFormat switches an array to scientific notation when its largest nonzero magnitude
// reaches this (numpy <= 2.2; numpy 2.3 lowered it to 1e6 for float32), or its smallest is below
// kSciBelow, or their ratio exceeds kSciRatio. numpy 2 compares float32 data with these as
// float32 values (NEP 50), so they are floats here too.
constexpr float kSciAtLeast = 1e8f;
constexpr float kSciBelow = 1e-4f;
constexpr float kSciRatio = 1000.0f;
// A float32 scalar (a 0-d array's str) prints positionally in [1e-4, 1e16), compared in a wider
// type, so float32(1e-4) itself, just below 1e-4, prints as "1e-04".
constexpr double kScalarPositionalFrom = 1e-4;
constexpr double kScalarPositionalBelow = 1e16;

// ---------------------------------------------------------------------------------------------
// Decimal digits of float32 magnitudes.

// value = digits[0].digits[1]digits[2]... x 10^exponent
struct Digits {
  std::string digits;
  int exponent = 0;
};

// Parses "d.ddde+xx" as std::to_chars and printf("%e") write it.
Digits parse_scientific(std::string_view text) {
  Digits out;
  const size_t e = text.find('e');
  for (const char c : text.substr(0, e)) {
    if (c != '.') out.digits += c;
  }
  std::string_view exponent = text.substr(e + 1);
  const bool negative = exponent.front() == '-';
  if (exponent.front() == '+' || exponent.front() == '-') exponent.remove_prefix(1);
  std::from_chars(exponent.data(), exponent.data() + exponent.size(), out.exponent);
  if (negative) out.exponent = -out.exponent;
  return out;
}

// Whether `value` (a double read back from digits) rounds to the float16 `half` (a non-negative
// float16 value as a float): inside the rounding interval around it, ties to the even one.
bool reads_back_as_half(double value, float half) {
  const uint16_t bits = float16_bits(half);
  const double h = half;
  const double below = bits == 0 ? -h : static_cast<double>(float16_to_float(static_cast<uint16_t>(bits - 1)));
  const double above = bits == 0x7bff ? 65536.0 : static_cast<double>(float16_to_float(static_cast<uint16_t>(bits + 1)));
  const double lo = (below + h) / 2, hi = (h + above) / 2;  // exact: halves are few bits
  const bool even = (bits & 1u) == 0;
  return (value > lo || (value == lo && even)) && (value < hi || (value == hi && even));
}

// Dragon4's unique digits: the shortest that read back as this float32 (ties to the digits nearest
// the exact value), which is std::to_chars's shortest round trip; for a float16 value the shortest
// that read back as that float16 (numpy's Dragon4 with float16's precision).
Digits shortest_digits(double magnitude, DType dtype = DType::float32) {
  char text[64];
  if (dtype == DType::float16 && std::isfinite(magnitude) && magnitude != 0) {
    for (int significant = 1; significant <= 5; ++significant) {
      std::snprintf(text, sizeof text, "%.*e", significant - 1, static_cast<double>(magnitude));
      if (reads_back_as_half(std::strtod(text, nullptr), static_cast<float>(magnitude))) return parse_scientific(text);
    }
  }
  // float64: the shortest digits that read back as the double.
  const auto result =
      dtype == DType::float64
          ? std::to_chars(text, text + sizeof text, magnitude, std::chars_format::scientific)
          : std::to_chars(text, text + sizeof text, static_cast<float>(magnitude), std::chars_format::scientific);
  return parse_scientific(std::string_view(text, static_cast<size_t>(result.ptr - text)));
}

// The exact value rounded half-to-even to `significant` digits.
Digits rounded_digits(double magnitude, int significant) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*e", significant - 1, static_cast<double>(magnitude));
  return parse_scientific(text);
}

void trim_trailing_zeros(std::string& digits, size_t keep) {
  while (digits.size() > keep && digits.back() == '0') digits.pop_back();
}

// Scientific digits as numpy's dragon4_scientific(unique=True) picks them: the unique digits, cut
// at `max_fraction` digits after the point, or extended to `min_fraction` digits (-1: none).
Digits scientific_digits(double magnitude, int max_fraction, int min_fraction, DType dtype) {
  Digits digits = shortest_digits(magnitude, dtype);
  const int fraction = static_cast<int>(digits.digits.size()) - 1;
  if (fraction > max_fraction) {
    digits = rounded_digits(magnitude, max_fraction + 1);
    trim_trailing_zeros(digits.digits, 1);
    // numpy pads back to min_digits: 1.999999999e8 is 2.00000000e+08 beside 8-digit neighbours.
    if (static_cast<int>(digits.digits.size()) - 1 < min_fraction)
      digits.digits.append(static_cast<size_t>(min_fraction + 1) - digits.digits.size(), '0');
  } else if (fraction < min_fraction) {
    digits = rounded_digits(magnitude, min_fraction + 1);
  }
  return digits;
}

std::string exponent_text(int exponent, size_t min_digits) {
  std::string digits = std::to_string(exponent < 0 ? -exponent : exponent);
  if (digits.size() < min_digits) digits.insert(0, min_digits - digits.size(), '0');
  return (exponent < 0 ? "e-" : "e+") + digits;
}

// A magnitude in positional notation, without sign or point.
struct Positional {
  std::string whole;
  std::string fraction;
};

Positional to_positional(const Digits& digits) {
  if (digits.digits.find_first_not_of('0') == std::string::npos) return {"0", ""};
  if (digits.exponent < 0) {
    return {"0", std::string(static_cast<size_t>(-digits.exponent - 1), '0') + digits.digits};
  }
  const auto whole_len = static_cast<size_t>(digits.exponent) + 1;
  if (digits.digits.size() <= whole_len) {
    return {digits.digits + std::string(whole_len - digits.digits.size(), '0'), ""};
  }
  return {digits.digits.substr(0, whole_len), digits.digits.substr(whole_len)};
}

// Positional digits as numpy's dragon4_positional(unique=True, fractional=True) picks them: the
// unique digits, cut at `max_fraction` digits after the point. `through_units` is numpy's
// min_digits=0, which makes Dragon4 print exact digits down to the units place: integers above
// 2^24 whose unique digits end in zeros (16777217 -> "16777216.", 99999992 -> "99999992.").
Positional positional_digits(double magnitude, int max_fraction, bool through_units, DType dtype) {
  const Digits shortest = shortest_digits(magnitude, dtype);
  const int fraction_needed = static_cast<int>(shortest.digits.size()) - 1 - shortest.exponent;
  char text[400];  // enough for DBL_MAX with 8 fraction digits
  if (fraction_needed > max_fraction) {
    std::snprintf(text, sizeof text, "%.*f", max_fraction, static_cast<double>(magnitude));
    const std::string_view printed = text;
    const size_t point = printed.find('.');
    Positional out{std::string(printed.substr(0, point)), ""};
    if (point != std::string_view::npos) out.fraction = printed.substr(point + 1);
    trim_trailing_zeros(out.fraction, 0);
    return out;
  }
  if (through_units && fraction_needed < 0) {
    // The shortest digits stopped above the units place, so the value is an integer.
    std::snprintf(text, sizeof text, "%.0f", static_cast<double>(magnitude));
    return {text, ""};
  }
  return to_positional(shortest);
}

std::string pad_left(std::string text, int64_t width) {
  if (static_cast<int64_t>(text.size()) < width) {
    text.insert(0, static_cast<size_t>(width) - text.size(), ' ');
  }
  return text;
}

// ---------------------------------------------------------------------------------------------
// Element formatters: one width for all elements, from the elements that will be printed.

// numpy's FloatingFormat for floatmode 'maxprec', sign '-', of float32 or float16 values.
// float64 (F = double) compares in float64, as numpy does for float64 data.
template <class F>
class FloatFormatterOf {
 public:
  explicit FloatFormatterOf(const std::vector<F>& sample, DType dtype = std::is_same_v<F, double> ? DType::float64 : DType::float32)
      : dtype_(dtype) {
    std::vector<F> finite;
    bool has_negative_inf = false;
    for (const F value : sample) {
      if (std::isfinite(value)) finite.push_back(value);
      if (std::isinf(value) && value < 0) has_negative_inf = true;
    }
    scientific_ = needs_scientific(finite);
    if (finite.empty()) {
      pad_left_ = pad_right_ = 0;
    } else if (scientific_) {
      measure_scientific(finite);
    } else {
      measure_positional(finite);
    }
    // Room for nan/inf/-inf in the same width as the numbers.
    if (finite.size() != sample.size()) {
      const int offset = pad_right_ + 1;
      pad_left_ = std::max({pad_left_, 3 - offset, 3 + (has_negative_inf ? 1 : 0) - offset});
    }
  }

  std::string operator()(F value) const {
    if (std::isnan(value)) return pad_left("nan", pad_left_ + pad_right_ + 1);
    if (std::isinf(value)) return pad_left(value < 0 ? "-inf" : "inf", pad_left_ + pad_right_ + 1);
    const std::string sign = std::signbit(value) ? "-" : "";
    const F magnitude = std::fabs(value);
    if (scientific_) {
      const Digits digits = scientific_digits(magnitude, fraction_digits_, fraction_digits_, dtype_);
      return pad_left(sign + digits.digits[0], pad_left_) + "." + digits.digits.substr(1) +
             exponent_text(digits.exponent, exponent_digits_);
    }
    const Positional digits = positional_digits(magnitude, kPrecision, true, dtype_);
    std::string text = pad_left(sign + digits.whole, pad_left_) + "." + digits.fraction;
    text.append(static_cast<size_t>(std::max<int64_t>(
                    0, pad_right_ - static_cast<int64_t>(digits.fraction.size()))),
                ' ');
    return text;
  }

 private:
  bool needs_scientific(const std::vector<F>& finite) const {
    F max_abs = 0;
    F min_abs = std::numeric_limits<F>::infinity();
    for (const F value : finite) {
      if (value == 0) continue;
      max_abs = std::max(max_abs, std::fabs(value));
      min_abs = std::min(min_abs, std::fabs(value));
    }
    if (max_abs == 0) return false;  // no nonzero finite values
    // The ratio is a float32 division, as in numpy; it may overflow to inf, which counts.
    // float16 data compares in float16 (NEP 50): the bounds and the ratio are rounded to it.
    if constexpr (std::is_same_v<F, double>)
      return max_abs >= 1e8 || min_abs < 1e-4 || max_abs / min_abs > 1000.0;
    return max_abs >= round_to(dtype_, kSciAtLeast) || min_abs < round_to(dtype_, kSciBelow) ||
           round_to(dtype_, max_abs / min_abs) > kSciRatio;
  }

  // First pass of dragon4_scientific(precision=8, unique=True, trim='.'): the widest mantissa
  // fraction becomes every element's digit count.
  void measure_scientific(const std::vector<F>& finite) {
    for (const F value : finite) {
      const Digits digits = scientific_digits(std::fabs(value), kPrecision, -1, dtype_);
      fraction_digits_ = std::max(fraction_digits_, static_cast<int>(digits.digits.size()) - 1);
      pad_left_ = std::max(pad_left_, std::signbit(value) ? 2 : 1);
      const int exponent = digits.exponent < 0 ? -digits.exponent : digits.exponent;
      exponent_digits_ = std::max(exponent_digits_, std::to_string(exponent).size());
    }
    pad_right_ = static_cast<int>(exponent_digits_) + 2 + fraction_digits_;
  }

  // First pass of dragon4_positional(precision=8, unique=True, trim='.').
  void measure_positional(const std::vector<F>& finite) {
    for (const F value : finite) {
      const Positional digits = positional_digits(std::fabs(value), kPrecision, false, dtype_);
      const int whole = static_cast<int>(digits.whole.size()) + (std::signbit(value) ? 1 : 0);
      pad_left_ = std::max(pad_left_, whole);
      pad_right_ = std::max(pad_right_, static_cast<int>(digits.fraction.size()));
    }
  }

  DType dtype_;
  bool scientific_ = false;
  int pad_left_ = 0;   // characters left of the point, sign included
  int pad_right_ = 0;  // positional: digits right of the point; scientific: only sizes nan/inf
  int fraction_digits_ = 0;
  size_t exponent_digits_ = 2;
};

using FloatFormatter = FloatFormatterOf<float>;
using DoubleFormatter = FloatFormatterOf<double>;

class HalfFormatter : public FloatFormatter {
 public:
  explicit HalfFormatter(const std::vector<float>& sample) : FloatFormatter(sample, DType::float16) {}
};

// bfloat16 (ml_dtypes): numpy prints a dtype it does not know through each element's repr(),
// unpadded, and ml_dtypes' repr is C++'s `ostream << float` (printf's %g: 6 significant digits)
// with NaN printed as "nan": [1 2.5 3.14062 -inf nan].
std::string bfloat16_text(float value) {
  if (std::isnan(value)) return "nan";
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(value));
  return text;
}

class Bfloat16Formatter {
 public:
  explicit Bfloat16Formatter(const std::vector<float>&) {}
  std::string operator()(float value) const { return bfloat16_text(value); }
};

// numpy's IntegerFormat: right-aligned to the longer of str(max) and str(min).
template <class I>
class IntFormatterOf {
 public:
  explicit IntFormatterOf(const std::vector<I>& sample) {
    const auto [min, max] = std::minmax_element(sample.begin(), sample.end());
    width_ = std::max(std::to_string(*min).size(), std::to_string(*max).size());
  }
  std::string operator()(I value) const {
    return pad_left(std::to_string(value), static_cast<int64_t>(width_));
  }

 private:
  size_t width_ = 0;
};
using IntFormatter = IntFormatterOf<int32_t>;

// numpy's IntegerFormat for uint32: the same right-aligned columns, unsigned values.
class UintFormatter {
 public:
  explicit UintFormatter(const std::vector<uint32_t>& sample) {
    const auto max = std::max_element(sample.begin(), sample.end());
    width_ = max == sample.end() ? 1 : std::to_string(*max).size();
  }
  std::string operator()(uint32_t value) const { return pad_left(std::to_string(value), static_cast<int64_t>(width_)); }

 private:
  size_t width_ = 0;
};

// numpy's BoolFormat: " True" and "False" in every array but a 0-d one, so columns line up.
class BoolFormatter {
 public:
  explicit BoolFormatter(const std::vector<int32_t>&) : width_(5) {}
  std::string operator()(int32_t value) const {
    return pad_left(value ? "True" : "False", static_cast<int64_t>(width_));
  }

 private:
  size_t width_;
};

// str() of a float32 scalar, which is what numpy prints for a 0-d array: the unique digits, no
// precision cut, "3.0" rather than "3." and "1e-05" rather than "1.e-05".
std::string scalar_text(double value, DType dtype = DType::float32) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  const std::string sign = std::signbit(value) ? "-" : "";
  const double magnitude = std::fabs(value);
  const Digits digits = shortest_digits(magnitude, dtype);
  const auto wide = static_cast<double>(magnitude);
  if (magnitude == 0 || (wide >= kScalarPositionalFrom && wide < kScalarPositionalBelow)) {
    const Positional positional = to_positional(digits);
    return sign + positional.whole + "." +
           (positional.fraction.empty() ? "0" : positional.fraction);
  }
  std::string mantissa = digits.digits.substr(0, 1);
  if (digits.digits.size() > 1) mantissa += "." + digits.digits.substr(1);
  return sign + mantissa + exponent_text(digits.exponent, 2);
}

// ---------------------------------------------------------------------------------------------
// Layout: numpy's _formatArray with separator ' ', prefix "" and legacy off.

class ArrayLayout {
 public:
  using ElementText = std::function<std::string(int64_t flat_index)>;

  ArrayLayout(const Shape& shape, bool summarise) : shape_(shape), summarise_(summarise) {
    strides_.assign(shape.size(), 1);
    for (size_t axis = shape.size(); axis-- > 1;) {
      strides_[axis - 1] = strides_[axis] * shape[axis];
    }
  }

  // Flat indices of the elements that will be printed (numpy's _leading_trailing), from which
  // the formatters take their widths.
  std::vector<int64_t> printed_elements() const {
    std::vector<int64_t> indices;
    collect_printed(0, 0, indices);
    return indices;
  }

  std::string format(const ElementText& element_text) const {
    // " " skips over the opening "[" on continuation lines.
    return format_block(0, 0, " ", kLineWidth, element_text);
  }

 private:
  // Whether only the first and last kEdgeItems positions along `axis` are printed.
  bool summarised(size_t axis) const { return summarise_ && shape_[axis] > 2 * kEdgeItems; }

  void collect_printed(size_t axis, int64_t offset, std::vector<int64_t>& indices) const {
    if (axis == shape_.size()) {
      indices.push_back(offset);
      return;
    }
    for (int64_t i = 0; i < shape_[axis]; ++i) {
      if (summarised(axis) && i == kEdgeItems) i = shape_[axis] - kEdgeItems;
      collect_printed(axis + 1, offset + i * strides_[axis], indices);
    }
  }

  // numpy's recurser(): the block at `offset` spanning axes [axis, rank), its first line indented
  // by `hanging_indent` (which the caller replaces by "["), wrapped to `width` columns.
  std::string format_block(size_t axis, int64_t offset, const std::string& hanging_indent,
                           int64_t width, const ElementText& element_text) const {
    const size_t axes_left = shape_.size() - axis;
    const std::string next_indent = hanging_indent + ' ';
    const int64_t next_width = width - 1;  // room for the closing "]"
    const int64_t length = shape_[axis];
    const bool summary = summarised(axis);
    const int64_t leading = summary ? kEdgeItems : 0;
    const int64_t trailing = summary ? kEdgeItems : length;
    const auto child = [&](int64_t i) {
      const int64_t child_offset = offset + i * strides_[axis];
      if (axes_left == 1) return element_text(child_offset);
      return format_block(axis + 1, child_offset, next_indent, next_width, element_text);
    };

    std::string text;
    if (axes_left == 1) {
      // The last axis: elements separated by ' ', wrapped so each line leaves room for "]".
      const int64_t element_width = width - 1;
      std::string line = hanging_indent;
      const auto add = [&](const std::string& word, bool last) {
        extend_line(text, line, word, element_width, hanging_indent);
        if (!last) line += ' ';
      };
      for (int64_t i = 0; i < leading; ++i) add(child(i), false);
      if (summary) add("...", false);
      for (int64_t i = trailing; i > 1; --i) add(child(length - i), false);
      add(child(length - 1), true);
      text += line;
    } else {
      // Outer axes: one row per line, with a blank line between blocks per extra axis.
      const std::string separator(axes_left - 1, '\n');
      for (int64_t i = 0; i < leading; ++i) text += hanging_indent + child(i) + separator;
      if (summary) text += hanging_indent + "..." + separator;
      for (int64_t i = trailing; i > 1; --i) {
        text += hanging_indent + child(length - i) + separator;
      }
      text += hanging_indent + child(length - 1);
    }
    return "[" + text.substr(hanging_indent.size()) + "]";
  }

  // numpy's _extendLine: wrap before `word` if it would pass `width`, unless the line holds only
  // the indent (wrapping would not help).
  static void extend_line(std::string& text, std::string& line, const std::string& word,
                          int64_t width, const std::string& indent) {
    const bool too_long = static_cast<int64_t>(line.size() + word.size()) > width;
    if (too_long && line.size() > indent.size()) {
      const size_t end = line.find_last_not_of(' ');
      text += line.substr(0, end == std::string::npos ? 0 : end + 1) + "\n";
      line = indent;
    }
    line += word;
  }

  const Shape& shape_;
  bool summarise_;
  std::vector<int64_t> strides_;
};

template <class T>
T element_at(const HostArray& array, int64_t index) {
  T value;
  std::memcpy(&value, array.bytes.data() + static_cast<size_t>(index) * sizeof(T), sizeof(T));
  return value;
}

template <class T, class Formatter, class S = T>
std::string format_elements(const HostArray& array, const ArrayLayout& layout) {
  std::vector<S> sample;
  for (const int64_t index : layout.printed_elements()) {
    sample.push_back(static_cast<S>(element_at<T>(array, index)));
  }
  const Formatter formatter(sample);
  return layout.format([&](int64_t index) { return formatter(static_cast<S>(element_at<T>(array, index))); });
}

}  // namespace

std::string format_array(const HostArray& array) {
  const std::optional<int64_t> count = checked_element_count(array.shape);
  if (!count || array.shape.size() > kMaxRank) {
    throw Error("format_array: shape " + shape_to_string(array.shape) +
                " is not a valid array shape (non-negative dimensions, at most " +
                std::to_string(kMaxRank) + " of them, fewer than 2^63 elements)");
  }
  const size_t item = host_element_bytes(array.dtype);  // float16 and bfloat16: 32-bit words
  if (array.bytes.size() / item != static_cast<uint64_t>(*count) ||
      array.bytes.size() % item != 0) {
    throw Error("format_array: a " + std::string(dtype_name(array.dtype)) + " array of shape " +
                shape_to_string(array.shape) + " needs " + std::to_string(*count) + " x " +
                std::to_string(item) + " bytes, but the HostArray holds " +
                std::to_string(array.bytes.size()));
  }

  if (array.shape.empty()) {
    if (array.dtype == DType::bool_) return element_at<int32_t>(array, 0) ? "True" : "False";
    if (array.dtype == DType::uint32) return std::to_string(element_at<uint32_t>(array, 0));
    if (array.dtype == DType::bfloat16) return bfloat16_text(element_at<float>(array, 0));
    if (array.dtype == DType::float16) return scalar_text(element_at<float>(array, 0), DType::float16);
    if (array.dtype == DType::float64) return scalar_text(element_at<double>(array, 0), DType::float64);
    if (array.dtype == DType::int64) return std::to_string(element_at<int64_t>(array, 0));
    if (array.dtype == DType::int8) return std::to_string(element_at<int8_t>(array, 0));
    if (array.dtype == DType::uint8) return std::to_string(element_at<uint8_t>(array, 0));
    return array.dtype == DType::float32 ? scalar_text(element_at<float>(array, 0))
                                         : std::to_string(element_at<int32_t>(array, 0));
  }
  if (*count == 0) return "[]";
  const ArrayLayout layout(array.shape, *count > kThreshold);
  switch (array.dtype) {
    case DType::float32:
      return format_elements<float, FloatFormatter>(array, layout);
    case DType::bool_:
      return format_elements<int32_t, BoolFormatter>(array, layout);
    case DType::uint32:
      return format_elements<uint32_t, UintFormatter>(array, layout);
    case DType::bfloat16:
      return format_elements<float, Bfloat16Formatter>(array, layout);
    case DType::float16:
      return format_elements<float, HalfFormatter>(array, layout);
    case DType::float64:
      return format_elements<double, DoubleFormatter>(array, layout);
    case DType::int64:
      return format_elements<int64_t, IntFormatterOf<int64_t>>(array, layout);
    case DType::int8:  // printed as their int values (std::to_string of a char would not be)
      return format_elements<int8_t, IntFormatterOf<int>, int>(array, layout);
    case DType::uint8:
      return format_elements<uint8_t, IntFormatterOf<int>, int>(array, layout);
    case DType::int32:
      break;
  }
  return format_elements<int32_t, IntFormatter>(array, layout);
}

}  // namespace meshvk::io
