// Chrome's Trace Event Format: "X" complete events (ts and dur in microseconds), "B"/"E" pairs,
// "M" metadata naming processes and threads, and "s"/"t"/"f" flow events binding to the slice
// that encloses them on their thread. Lanes are (pid, tid) pairs; meshvk's lane names ("CPU 3",
// "host") tell which lane is which device.
#include "trace_json.hpp"

#include <fcntl.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <simdjson.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <unordered_set>
#include <utility>
#include <vector>

namespace inspector {
namespace {

namespace sj = simdjson;
namespace od = simdjson::ondemand;

int64_t to_ns(double us) {
  if (!std::isfinite(us)) return 0;
  const double ns = us * 1000.0;
  // The loader refuses times past +-2^53 ns; the clamp only keeps arithmetic from overflowing.
  return static_cast<int64_t>(std::clamp(ns, -4.0e18, 4.0e18));
}

uint64_t to_count(double v) {
  if (!std::isfinite(v) || v <= 0) return 0;
  return v >= 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(v);
}

// "CPU 3", "GPU 0", "CPU 3 queue 1": the device a meshvk lane name is for; -1 otherwise.
int device_in(const std::string& name) {
  for (const char* prefix : {"CPU ", "GPU "}) {
    if (name.rfind(prefix, 0) != 0) continue;
    const char* digits = name.c_str() + 4;
    if (*digits < '0' || *digits > '9') return -1;
    return static_cast<int>(std::min(std::strtol(digits, nullptr, 10), 1L << 20));
  }
  return -1;
}

struct FlowEnd {
  std::string id;
  uint64_t from = 0, to = 0;  // meshvk's flows name their spans' ids in args
  bool wait = false;
  int lane = 0;
  int64_t ts = 0;
  char phase = 's';
  bool bind_enclosing = true;
};

// The span on `lane` enclosing `ts`, innermost; or (for a flow end bound to the next slice) the
// first span starting at or after it. SIZE_MAX when there is none.
size_t bind(const TraceData& data, const FlowEnd& end) {
  const auto& ids = data.lanes()[end.lane].spans;
  const auto& spans = data.spans();
  auto it = std::upper_bound(ids.begin(), ids.end(), end.ts,
                             [&](int64_t t, size_t i) { return t < spans[i].start_ns; });
  if (!end.bind_enclosing) return it == ids.end() ? SIZE_MAX : *it;
  // Walk back over spans that start at or before ts; the latest-starting one that still covers
  // ts is the innermost. Bounded, so a lane of millions of spans stays quick.
  int steps = 0;
  while (it != ids.begin() && steps++ < 4096) {
    --it;
    const TraceSpan& s = spans[*it];
    if (s.end_ns >= end.ts) return *it;
  }
  return SIZE_MAX;
}

// "16 MiB", or "1.5 MiB" for a limit that is not whole MiB, so the message states it exactly
// enough to act on.
std::string mib(size_t bytes) {
  if (bytes % (size_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

// What simdjson reserves to read `n` bytes of text (its set_capacity: a 32-bit index entry per
// possible structural character and a string buffer of 5/3 of the text), plus the padded copy of
// the text it reads from. The index is only touched where the text has structure, so real traces
// stay well under this; "[0,0,0,...]" can reach it.
size_t parse_bytes(size_t n) {
  const size_t rounded = (n + 63) / 64 * 64;
  return (n + sj::SIMDJSON_PADDING) + 4 * (rounded + 9) +
         ((5 * n / 3 + sj::SIMDJSON_PADDING + 63) / 64 * 64);
}

// 2^53 ns, about 104 days: the span of times a trace may hold, either side of 0. Times are read
// as doubles of microseconds and kept as int64 ns; within it every ns stays exact in a double.
constexpr double kMaxTimeNs = 9007199254740992.0;
const char* const kTimeRange = "2^53 ns (about 104 days)";

std::string at_byte(size_t offset) {
  return " at byte " + std::to_string(offset);
}

// A token as a message quotes it: without the whitespace after it, and not too long.
std::string quoted(std::string_view token) {
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t' || token.back() == '\n' ||
                            token.back() == '\r'))
    token.remove_suffix(1);
  if (token.size() > 40) return std::string(token.substr(0, 37)) + "...";
  return std::string(token);
}

// JSON's grammar for a number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
bool json_number(std::string_view t) {
  size_t i = 0;
  const auto digits = [&] {
    const size_t from = i;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
    return i > from;
  };
  if (i < t.size() && t[i] == '-') ++i;
  if (i < t.size() && t[i] == '0')
    ++i;
  else if (!digits())
    return false;
  if (i < t.size() && t[i] == '.' && (++i, !digits())) return false;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == t.size();
}

// A byte JSON allows nowhere: a control character but tab, newline and carriage return (those
// three only outside strings, which simdjson checks). A NUL would otherwise pass where On-Demand
// does not look, e.g. after the last value. "" when there is none.
std::string raw_control_byte(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
#if defined(__SSE2__)
  // 16 bytes at a time (a 512 MiB file in a fraction of a second), then the byte itself.
  const __m128i limit = _mm_set1_epi8(0x1F);
  const __m128i tab = _mm_set1_epi8('\t'), newline = _mm_set1_epi8('\n'), cr = _mm_set1_epi8('\r');
  for (; i + 16 <= n; i += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    const __m128i control = _mm_cmpeq_epi8(_mm_min_epu8(v, limit), v);  // v <= 0x1F
    const __m128i allowed = _mm_or_si128(
        _mm_or_si128(_mm_cmpeq_epi8(v, tab), _mm_cmpeq_epi8(v, newline)), _mm_cmpeq_epi8(v, cr));
    if (_mm_movemask_epi8(_mm_andnot_si128(allowed, control)) != 0) break;
  }
#endif
  for (; i < n; ++i) {
    const unsigned c = p[i];
    if (c >= 0x20 || c == '\t' || c == '\n' || c == '\r') continue;
    if (c == 0) return "raw NUL byte" + at_byte(i);
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", c);
    return std::string("raw control byte ") + hex + at_byte(i);
  }
  return {};
}

// Where simdjson's "not UTF-8" is: the first byte that starts no valid sequence; npos for none.
size_t invalid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0, min = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return i;
    }
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

// Where the brackets, braces and strings of the text first go wrong, for the messages simdjson's
// error codes cannot give (it knows a structure is wrong, not where). Only run on an error: one
// pass, one bit per open bracket. "" when they are all right.
std::string structure_problem(std::string_view text) {
  std::vector<bool> open;  // true: an object
  bool in_string = false, escaped = false, closed = false;
  char last = 0;   // the last character outside strings that was not whitespace
  size_t end = 0;  // and the offset just past it
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
        last = c, end = i + 1;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        const char* name = c == '\t'   ? "tab"
                           : c == '\n' ? "newline"
                           : c == '\r' ? "carriage return"
                                       : "control byte";
        return std::string("raw ") + name + " in a string" + at_byte(i);
      }
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    if (closed) return "more text after the trace's value" + at_byte(i);
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      open.push_back(c == '{');
    } else if (c == '}' || c == ']') {
      if (open.empty()) return std::string("unexpected '") + c + "'" + at_byte(i);
      if (open.back() != (c == '}'))
        return std::string("missing closing ") + (open.back() ? "brace" : "bracket") + at_byte(i) +
               " (found '" + c + "')";
      open.pop_back();
      closed = open.empty();
    }
    last = c, end = i + 1;
  }
  if (in_string)
    return "the text ends inside a string: missing closing quote" + at_byte(text.size());
  if (open.empty()) return {};
  if (last == ':' || last == ',')
    return std::string("the text ends after '") + last + "'" + at_byte(end - 1) +
           ": a value is missing";
  return std::string("missing closing ") + (open.back() ? "brace" : "bracket") + at_byte(end);
}

// The keys of one object, to find one given twice: a bit each for the members the loader reads
// (the usual case, and cheap), a list for a few others, a hash set past that. The views point
// into simdjson's string buffer.
class KeySet {
 public:
  static constexpr size_t kBytesPerKey = 64;  // a hash set's node and bucket, roughly

  // `known`: the key's number among the members the loader reads, or -1.
  bool insert(std::string_view key, int known) {
    if (known >= 0) {
      const uint32_t bit = uint32_t{1} << known;
      if (known_ & bit) return false;
      known_ |= bit;
      return true;
    }
    if (set_.empty()) {
      for (const std::string_view k : list_)
        if (k == key) return false;
      if (list_.size() < 16) {
        list_.push_back(key);
        return true;
      }
      set_.insert(list_.begin(), list_.end());
    }
    return set_.insert(key).second;
  }
  size_t bytes() const { return set_.size() * kBytesPerKey; }
  void clear() {
    known_ = 0;
    list_.clear();
    if (!set_.empty()) set_ = {};
  }

 private:
  uint32_t known_ = 0;
  std::vector<std::string_view> list_;
  std::unordered_set<std::string_view> set_;
};

// The members of events and of their args that the loader reads, numbered for KeySet. (Compared
// by length, then bytes: a few instructions each, as they are compared for every member.)
template <size_t N>
bool is(std::string_view k, const char (&literal)[N]) {
  return std::memcmp(k.data(), literal, N - 1) == 0;  // k.size() == N - 1: the switches check
}
enum EventKey { kPh, kName, kCat, kBp, kId, kBindId, kPid, kTid, kTs, kDur, kArgs };
int event_key(std::string_view k) {
  switch (k.size()) {
    case 2:
      return is(k, "ph") ? kPh : is(k, "ts") ? kTs : is(k, "id") ? kId : is(k, "bp") ? kBp : -1;
    case 3:
      return is(k, "pid")   ? kPid
             : is(k, "tid") ? kTid
             : is(k, "dur") ? kDur
             : is(k, "cat") ? kCat
                            : -1;
    case 4:
      return is(k, "name") ? kName : is(k, "args") ? kArgs : -1;
    case 7:
      return is(k, "bind_id") ? kBindId : -1;
    default:
      return -1;
  }
}
enum ArgsKey {
  kArgName,
  kArgKind,
  kArgOp,
  kArgProgram,
  kArgBytes,
  kArgFlops,
  kArgPeer,
  kArgId,
  kArgFrom,
  kArgTo,
  kArgRule
};
int args_key(std::string_view k) {
  switch (k.size()) {
    case 2:
      return is(k, "op") ? kArgOp : is(k, "id") ? kArgId : is(k, "to") ? kArgTo : -1;
    case 4:
      return is(k, "name")   ? kArgName
             : is(k, "kind") ? kArgKind
             : is(k, "peer") ? kArgPeer
             : is(k, "from") ? kArgFrom
             : is(k, "rule") ? kArgRule
                             : -1;
    case 5:
      return is(k, "bytes") ? kArgBytes : is(k, "flops") ? kArgFlops : -1;
    case 7:
      return is(k, "program") ? kArgProgram : -1;
    default:
      return -1;
  }
}

// The members of an event the loader understands. The views point into simdjson's string
// buffer, which holds every string of the document until the next parse.
struct Args {
  std::string_view name, op, program, rule;
  std::optional<std::string_view> kind;
  double bytes = 0, flops = 0, peer = -1, id = 0, from = 0, to = 0;
};

struct Event {
  std::string_view ph, name, cat, bp;
  std::optional<std::string_view> id, bind_id;
  double pid = 0, tid = 0, ts = 0, dur = 0;
  std::string_view ts_text;  // ts as written, for messages
  Args args;
};

// Where a member is, for messages: "in event 12", "in the args of event 12", "in otherData".
struct Place {
  enum Kind { event, args, other_data } kind;
  size_t event_index = 0;
  std::string text() const {
    if (kind == other_data) return "in otherData";
    return (kind == args ? "in the args of event " : "in event ") + std::to_string(event_index);
  }
};

// What a number member may hold.
enum class Range { any, time, duration };

// Builds the model from the events as simdjson streams them, reading every value of the text:
// On-Demand checks only what it is asked for (skipping the rest by its brackets), so members the
// loader has no use for are walked through too, and every object's keys are checked for one
// given twice. The reading methods return false with error_ set to the message for
// TraceLoad::error.
class Loader {
 public:
  Loader(TraceLoad& load, const TraceLimits& limits, size_t model_budget,
         sj::padded_string_view text)
      : load_(load), limits_(limits), budget_(model_budget), text_(text) {}

  // "" on success, else what is wrong.
  std::string parse();
  void finish();

 private:
  bool document();
  bool events(od::array& events, size_t depth);
  bool event(od::object& object, Event& event, size_t index, size_t depth);
  bool args(od::object& object, Args& args, size_t index, size_t depth);
  bool other_data(od::value& value, size_t depth);
  bool key(od::field& field, KeySet& keys, std::string_view& key, const Place* place,
           int (*known)(std::string_view) = nullptr, int* number = nullptr);
  bool read(od::value& value, std::optional<std::string_view>& out, size_t depth);
  bool read(od::value& value, std::string_view& out, size_t depth);
  bool read(od::value& value, double& out, std::string_view key, const Place& place, size_t depth,
            Range range = Range::any, std::string_view* text = nullptr);
  bool check(od::value& value, size_t depth);
  bool open(od::value& value, size_t depth);
  bool add(const Event& e, size_t index);
  bool fail(std::string message) {
    error_ = std::move(message);
    return false;
  }
  bool invalid(sj::error_code err);
  bool not_a_value(std::string_view token);
  bool bad_number(std::string_view token, std::string_view key, const Place* place);
  size_t offset(const char* p) const { return static_cast<size_t>(p - text_.data()); }

  TraceLoad& load_;
  const TraceLimits& limits_;
  size_t budget_;
  sj::padded_string_view text_;
  od::parser parser_;
  od::document doc_;
  bool iterating_ = false;  // doc_ has text to point into
  std::string error_;
  size_t count_ = 0;
  // What the model and the maps below take, roughly: every vector may hold twice what it uses.
  size_t model_bytes_ = 0;
  size_t scratch_bytes_ = 0;  // the key sets of the objects being checked
  uint64_t order_ = 0;
  std::map<int64_t, std::string> process_names_;
  std::vector<FlowEnd> flow_ends_;
  // "B" without "E": the span and the index of its event.
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<size_t, size_t>>> open_begins_;
  std::map<uint64_t, size_t> span_of_id_;  // meshvk's span ids (args.id) to spans
  KeySet event_keys_, args_keys_;
  // The containers `check` is inside of, innermost last.
  struct Frame {
    bool object = false;
    bool started = false;  // a member was handed out: step past it before the next
    od::array_iterator element, elements_end;
    od::object_iterator member, members_end;
    KeySet keys;
  };
  std::vector<Frame> frames_;
};

bool Loader::invalid(sj::error_code err) {
  if (err == sj::MEMALLOC) return fail("too large to load: out of memory while parsing");
  if (err == sj::UTF8_ERROR) {
    const size_t at = invalid_utf8(text_);
    if (at != std::string_view::npos) return fail("not valid JSON: invalid UTF-8" + at_byte(at));
  }
  if (err == sj::TAPE_ERROR || err == sj::INCOMPLETE_ARRAY_OR_OBJECT ||
      err == sj::UNESCAPED_CHARS || err == sj::UNCLOSED_STRING) {
    const std::string found = structure_problem(text_);
    if (!found.empty()) return fail("not valid JSON: " + found);
  }
  // Where simdjson stopped (past the first token: errors at the root have no better place).
  std::string message = "not valid JSON";
  const char* at = nullptr;
  if (iterating_ && !doc_.current_location().get(at) && at > text_.data() &&
      at <= text_.data() + text_.length())
    message += " near byte " + std::to_string(offset(at));
  return fail(message + ": " + sj::error_message(err));
}

bool Loader::not_a_value(std::string_view token) {
  const std::string text = quoted(token);
  const size_t at = offset(token.data());
  if (text.empty() || text[0] == '}' || text[0] == ']' || text[0] == ',' || text[0] == ':')
    return fail("not valid JSON: unexpected '" + text.substr(0, 1) + "'" + at_byte(at));
  return fail("not valid JSON: '" + text + "'" + at_byte(at) + " is not a JSON value");
}

// A number simdjson could not read: not JSON's grammar, or too large for a double.
bool Loader::bad_number(std::string_view token, std::string_view key, const Place* place) {
  const std::string text = quoted(token);
  if (!json_number(text))
    return fail("not valid JSON: '" + text + "'" + at_byte(offset(token.data())) +
                " is not a number");
  if (!place)
    return fail("number " + text + at_byte(offset(token.data())) +
                " is not a finite number (too large for a double)");
  return fail("'" + std::string(key) + "' " + text + " " + place->text() +
              " is not a finite number");
}

// An object's next key, unescaped, which must not have come before in it.
bool Loader::key(od::field& field, KeySet& keys, std::string_view& key, const Place* place,
                 int (*known)(std::string_view), int* number) {
  const char* quote = field.key().raw() - 1;
  if (const auto err = field.unescaped_key().get(key)) return invalid(err);
  const int n = known ? known(key) : -1;
  if (number) *number = n;
  const size_t before = n < 0 ? keys.bytes() : 0;
  if (!keys.insert(key, n))
    return fail("duplicate key \"" + quoted(key) + "\"" + (place ? " " + place->text() : "") +
                at_byte(offset(quote)));
  if (n >= 0) return true;
  scratch_bytes_ += keys.bytes() - before;
  if (model_bytes_ + scratch_bytes_ > budget_)
    return fail(
        "too large to load: checking the keys of its objects for duplicates needs more than the " +
        mib(limits_.max_memory) + " of memory allowed (text and parser included)");
  return true;
}

// A value with no use to the loader (or of a type it has no use for there): read all the same,
// to the end of its deepest member, without recursion.
bool Loader::check(od::value& value, size_t depth) {
  bool ok = open(value, depth);
  while (ok && !frames_.empty()) {
    Frame& f = frames_.back();
    const size_t child_depth = depth + frames_.size();
    if (f.object) {
      if (f.started) ++f.member;
      f.started = true;
      if (!(f.member != f.members_end)) {
        scratch_bytes_ -= f.keys.bytes();
        frames_.pop_back();
        continue;
      }
      od::field field;
      std::string_view name;
      if (const auto err = (*f.member).get(field))
        ok = invalid(err);
      else  // open may push a frame: f is not used after it
        ok = key(field, f.keys, name, nullptr) && open(field.value(), child_depth);
    } else {
      if (f.started) ++f.element;
      f.started = true;
      if (!(f.element != f.elements_end)) {
        frames_.pop_back();
        continue;
      }
      od::value element;
      if (const auto err = (*f.element).get(element))
        ok = invalid(err);
      else
        ok = open(element, child_depth);
    }
  }
  for (const Frame& f : frames_) scratch_bytes_ -= f.keys.bytes();
  frames_.clear();
  return ok;
}

// Reads a scalar, or starts reading an array or object (a frame for `check`).
bool Loader::open(od::value& value, size_t depth) {
  const std::string_view token = value.raw_json_token();
  od::json_type type;
  if (value.type().get(type)) return not_a_value(token);
  sj::error_code err = sj::SUCCESS;
  switch (type) {
    case od::json_type::array:
    case od::json_type::object: {
      if (depth > limits_.max_depth)
        return fail("too deep to load: more than " + std::to_string(limits_.max_depth) +
                    " levels of nesting" + at_byte(offset(token.data())) +
                    " (the limit on nesting in a trace)");
      Frame& f = frames_.emplace_back();
      f.object = type == od::json_type::object;
      if (f.object) {
        od::object object;
        if (!(err = value.get_object().get(object)) && !(err = object.begin().get(f.member)))
          err = object.end().get(f.members_end);
      } else {
        od::array array;
        if (!(err = value.get_array().get(array)) && !(err = array.begin().get(f.element)))
          err = array.end().get(f.elements_end);
      }
      break;
    }
    case od::json_type::number: {
      double number;
      err = value.get_double().get(number);
      // simdjson says INCORRECT_TYPE for "-" or "-x" (a '-' begins a number, so it looked like one)
      if (err == sj::NUMBER_ERROR || err == sj::NUMBER_OUT_OF_RANGE || err == sj::INCORRECT_TYPE)
        return bad_number(token, "", nullptr);
      break;
    }
    case od::json_type::string: {
      std::string_view text;
      err = value.get_string().get(text);
      break;
    }
    case od::json_type::boolean: {
      bool b;
      err = value.get_bool().get(b);
      if (err == sj::INCORRECT_TYPE) return not_a_value(token);
      break;
    }
    case od::json_type::null: {
      bool null = false;
      err = value.is_null().get(null);
      if (err == sj::INCORRECT_TYPE || (!err && !null)) return not_a_value(token);
      break;
    }
  }
  return err ? invalid(err) : true;
}

bool Loader::read(od::value& value, std::optional<std::string_view>& out, size_t depth) {
  std::string_view text;
  const sj::error_code err = value.get_string().get(text);
  if (!err) {
    out = text;
    return true;
  }
  // Another type: the field keeps its fallback, as a reader of Chrome traces is expected to be
  // lenient, but the value must still be JSON.
  return err == sj::INCORRECT_TYPE ? check(value, depth) : invalid(err);
}

bool Loader::read(od::value& value, std::string_view& out, size_t depth) {
  std::optional<std::string_view> text;
  const bool ok = read(value, text, depth);
  if (text) out = *text;
  return ok;
}

// A number member: a number no double holds, or a time outside +-2^53 ns, or a negative
// duration, is an error naming it; another type keeps the fallback.
bool Loader::read(od::value& value, double& out, std::string_view key, const Place& place,
                  size_t depth, Range range, std::string_view* text) {
  const std::string_view token = value.raw_json_token();
  double number = 0;
  const sj::error_code err = value.get_double().get(number);
  if (err == sj::INCORRECT_TYPE) return check(value, depth);
  if (err == sj::NUMBER_ERROR || err == sj::NUMBER_OUT_OF_RANGE)
    return bad_number(token, key, &place);
  if (err) return invalid(err);
  const auto named = [&] {
    return "'" + std::string(key) + "' " + quoted(token) + " " + place.text();
  };
  if (range == Range::time && std::fabs(number) * 1000.0 > kMaxTimeNs)
    return fail(named() + " is outside -2^53.." + kTimeRange);
  if (range == Range::duration && number < 0) return fail(named() + " is negative");
  if (range == Range::duration && number * 1000.0 > kMaxTimeNs)
    return fail(named() + " is outside 0.." + kTimeRange);
  out = number;
  if (text) *text = token;
  return true;
}

bool Loader::args(od::object& object, Args& args, size_t index, size_t depth) {
  const Place place{Place::args, index};
  args_keys_.clear();
  for (auto member : object) {
    od::field field;
    std::string_view key;
    int known = -1;
    if (const auto err = std::move(member).get(field)) return invalid(err);
    if (!this->key(field, args_keys_, key, &place, args_key, &known)) return false;
    od::value& value = field.value();
    const size_t d = depth + 1;
    bool ok = true;
    switch (known) {
      case kArgName:
        ok = read(value, args.name, d);
        break;
      case kArgKind:
        ok = read(value, args.kind, d);
        break;
      case kArgOp:
        ok = read(value, args.op, d);
        break;
      case kArgProgram:
        ok = read(value, args.program, d);
        break;
      case kArgRule:
        ok = read(value, args.rule, d);
        break;
      case kArgBytes:
        ok = read(value, args.bytes, key, place, d);
        break;
      case kArgFlops:
        ok = read(value, args.flops, key, place, d);
        break;
      case kArgPeer:
        ok = read(value, args.peer, key, place, d);
        break;
      case kArgId:
        ok = read(value, args.id, key, place, d);
        break;
      case kArgFrom:
        ok = read(value, args.from, key, place, d);
        break;
      case kArgTo:
        ok = read(value, args.to, key, place, d);
        break;
      default:
        ok = check(value, d);
    }
    if (!ok) return false;
  }
  return true;
}

// One pass over the members, in whatever order they come.
bool Loader::event(od::object& object, Event& event, size_t index, size_t depth) {
  const Place place{Place::event, index};
  event_keys_.clear();
  for (auto member : object) {
    od::field field;
    std::string_view key;
    int known = -1;
    if (const auto err = std::move(member).get(field)) return invalid(err);
    if (!this->key(field, event_keys_, key, &place, event_key, &known)) return false;
    od::value& value = field.value();
    const size_t d = depth + 1;
    bool ok = true;
    switch (known) {
      case kPh:
        ok = read(value, event.ph, d);
        break;
      case kName:
        ok = read(value, event.name, d);
        break;
      case kCat:
        ok = read(value, event.cat, d);
        break;
      case kBp:
        ok = read(value, event.bp, d);
        break;
      case kId:
        ok = read(value, event.id, d);
        break;
      case kBindId:
        ok = read(value, event.bind_id, d);
        break;
      case kPid:
        ok = read(value, event.pid, key, place, d);
        break;
      case kTid:
        ok = read(value, event.tid, key, place, d);
        break;
      case kTs:
        ok = read(value, event.ts, key, place, d, Range::time, &event.ts_text);
        break;
      case kDur:
        ok = read(value, event.dur, key, place, d, Range::duration);
        break;
      case kArgs: {
        od::object object;
        const sj::error_code err = value.get_object().get(object);
        if (!err)
          ok = args(object, event.args, index, d);
        else  // "args" that is not an object: no args
          ok = err == sj::INCORRECT_TYPE ? check(value, d) : invalid(err);
        break;
      }
      default:
        ok = check(value, d);
    }
    if (!ok) return false;
  }
  return true;
}

bool Loader::events(od::array& events, size_t depth) {
  for (auto element : events) {
    od::value value;
    if (const auto err = std::move(element).get(value)) return invalid(err);
    const size_t index = count_;
    if (++count_ > limits_.max_events)
      return fail("too large to load: more than " + std::to_string(limits_.max_events) +
                  " events (the limit on events in a trace)");
    od::object object;
    if (const auto err = value.get_object().get(object)) {
      if (err != sj::INCORRECT_TYPE) return invalid(err);
      ++load_.skipped;  // an entry that is not an object is not an event
      if (!check(value, depth + 1)) return false;
      continue;
    }
    Event e;
    if (!event(object, e, index, depth + 1) || !add(e, index)) return false;
    if (model_bytes_ > budget_)
      return fail("too large to load: the timeline for its first " + std::to_string(count_) +
                  " events already needs more than the " + mib(limits_.max_memory) +
                  " of memory allowed (text and parser included)");
  }
  return true;
}

// meshvk's clock origin and, in a job of several processes, the offset of process 0's clock, so
// that traces of several processes (and hosts) line up; anything else there is not needed (but
// still read).
bool Loader::other_data(od::value& value, size_t depth) {
  od::object other;
  if (const auto err = value.get_object().get(other))
    return err == sj::INCORRECT_TYPE ? check(value, depth) : invalid(err);
  const Place place{Place::other_data};
  KeySet keys;
  for (auto entry : other) {
    od::field field;
    std::string_view name;
    if (const auto err = std::move(entry).get(field)) return invalid(err);
    if (!key(field, keys, name, &place)) return false;
    od::value& v = field.value();
    // What the profiler lost, for the timeline's warning; anything but a count is left alone.
    uint64_t* lost = name == "dropped_spans"    ? &load_.data.losses.device_spans
                     : name == "dropped_events" ? &load_.data.losses.events
                     : name == "dropped_flows"  ? &load_.data.losses.flows
                                                : nullptr;
    if (lost) {
      uint64_t n = 0;
      if (!v.get_uint64().get(n))
        *lost = n;
      else if (!check(v, depth + 1))
        return false;
      continue;
    }
    std::optional<int64_t>* clock = name == "clock_origin_ns"   ? &load_.clock_origin_ns
                                    : name == "clock_offset_ns" ? &load_.clock_offset_ns
                                                                : nullptr;
    if (!clock) {
      if (!check(v, depth + 1)) return false;
      continue;
    }
    const std::string_view token = v.raw_json_token();
    od::json_type type;
    int64_t ns = 0;
    if (!v.get_int64().get(ns)) {
      *clock = ns;
    } else if (!v.type().get(type) && type == od::json_type::number) {
      if (!json_number(quoted(token))) return bad_number(token, name, &place);
      return fail("'" + std::string(name) + "' " + quoted(token) + " " + place.text() +
                  " is not a whole number of ns within int64");
    } else if (!check(v, depth + 1)) {
      return false;
    }
  }
  return true;
}

bool Loader::document() {
  const char* const not_trace =
      "not a Chrome trace: expected an array of events or an object with a \"traceEvents\" "
      "array";
  od::json_type type;
  if (const auto err = doc_.type().get(type)) return invalid(err);
  if (type == od::json_type::array) {
    od::array events;
    if (const auto err = doc_.get_array().get(events)) return invalid(err);
    if (!this->events(events, 1)) return false;
  } else if (type == od::json_type::object) {
    od::object root;
    if (const auto err = doc_.get_object().get(root)) return invalid(err);
    bool found = false;
    KeySet keys;
    for (auto member : root) {
      od::field field;
      std::string_view name;
      if (const auto err = std::move(member).get(field)) return invalid(err);
      if (!key(field, keys, name, nullptr)) return false;
      bool ok = true;
      if (name == "traceEvents") {
        od::array events;
        if (const auto err = field.value().get_array().get(events))
          return err == sj::INCORRECT_TYPE ? fail(not_trace) : invalid(err);
        found = true;
        ok = this->events(events, 2);
      } else if (name == "otherData") {
        ok = other_data(field.value(), 2);
      } else {
        ok = check(field.value(), 2);
      }
      if (!ok) return false;
    }
    if (!found) return fail(not_trace);
  } else {
    return fail(not_trace);
  }
  // On-Demand reads only what is asked for; text after the value is still an error.
  const char* rest = nullptr;
  if (const auto err = doc_.current_location().get(rest); err != sj::OUT_OF_BOUNDS) {
    if (err || rest < text_.data())
      return fail("not valid JSON: more text after the trace's value");
    return fail("not valid JSON: more text after the trace's value" + at_byte(offset(rest)));
  }
  return true;
}

std::string Loader::parse() {
  if (std::string found = raw_control_byte(text_); !found.empty())
    return "not valid JSON: " + found;
  if (const auto err = parser_.iterate(text_).get(doc_)) {
    invalid(err);
    return error_;
  }
  iterating_ = true;
  return document() ? std::string() : error_;
}

bool Loader::add(const Event& e, size_t index) {
  TraceData& data = load_.data;
  const std::string_view ph = e.ph;
  const int64_t pid = static_cast<int64_t>(std::clamp(e.pid, -1e15, 1e15));
  const int64_t tid = static_cast<int64_t>(std::clamp(e.tid, -1e15, 1e15));
  constexpr size_t kNode = 64;  // a std::map node's overhead

  if (ph == "M") {
    if (e.name == "thread_name") {
      const int lane = data.lane_for_thread(pid, tid);
      if (lane >= 0) data.set_lane_name(lane, std::string(e.args.name));
    } else if (e.name == "process_name") {
      model_bytes_ += kNode + e.args.name.size();
      process_names_[pid] = std::string(e.args.name);
    }
    return true;
  }
  if (ph == "X" || ph == "B") {
    TraceSpan span;
    span.id = ++order_;
    span.lane = data.lane_for_thread(pid, tid);
    if (span.lane < 0) {
      ++load_.skipped;
      return true;
    }
    span.name = e.name;
    span.kind = span_kind_from(std::string(e.args.kind.value_or(e.cat)));
    span.op = e.args.op;
    span.program = e.args.program;
    span.rule = e.args.rule;
    span.start_ns = to_ns(e.ts);
    span.end_ns = ph == "X" ? span.start_ns + std::max<int64_t>(0, to_ns(e.dur)) : span.start_ns;
    span.bytes = to_count(e.args.bytes);
    span.flops = to_count(e.args.flops);
    span.peer = static_cast<int>(std::clamp(e.args.peer, -1.0, 1e6));
    // The span and its lane's index entry, and their strings.
    model_bytes_ += 2 * (sizeof(TraceSpan) + sizeof(size_t)) + span.name.size() + span.op.size() +
                    span.program.size() + span.rule.size();
    const size_t span_index = data.add_span(std::move(span));
    if (e.args.id > 0) {
      model_bytes_ += kNode;
      span_of_id_[to_count(e.args.id)] = span_index;
    }
    if (ph == "B") {
      model_bytes_ += kNode + 4 * sizeof(size_t);
      open_begins_[{pid, tid}].emplace_back(span_index, index);
    }
    return true;
  }
  if (ph == "E") {
    // find, not [], so that "E" events for made-up threads cannot grow the map.
    const auto stack = open_begins_.find({pid, tid});
    if (stack == open_begins_.end() || stack->second.empty()) {
      ++load_.skipped;
      return true;
    }
    const auto [span, begin] = stack->second.back();
    const int64_t start = data.spans()[span].start_ns;
    // An end before its start would be a negative duration.
    if (to_ns(e.ts) < start) {
      char ts[32];
      std::snprintf(ts, sizeof ts, "%.15g", static_cast<double>(start) / 1000.0);
      return fail("'ts' " + quoted(e.ts_text) + " in event " + std::to_string(index) +
                  " is before the start of the \"B\" it ends (event " + std::to_string(begin) +
                  ", ts " + ts + ")");
    }
    data.set_span_end(span, to_ns(e.ts));
    stack->second.pop_back();
    return true;
  }
  if (ph == "s" || ph == "t" || ph == "f") {
    FlowEnd end;
    end.id = e.id.value_or(e.bind_id.value_or(""));
    end.lane = data.lane_for_thread(pid, tid);
    if (end.lane < 0) return true;
    end.ts = to_ns(e.ts);
    end.phase = ph[0];
    end.from = to_count(e.args.from);
    end.to = to_count(e.args.to);
    end.wait = e.name == "wait" || e.cat == "wait";
    // Chrome binds a flow end to the next slice unless "bp":"e" says the enclosing one.
    end.bind_enclosing = ph != "f" || e.bp == "e";
    // The end, the flow it may become and the map of starts below.
    model_bytes_ += 2 * (sizeof(FlowEnd) + sizeof(TraceFlow)) + kNode + 2 * end.id.size();
    flow_ends_.push_back(std::move(end));
    return true;
  }
  ++load_.skipped;
  return true;
}

void Loader::finish() {
  TraceData& data = load_.data;
  data.finish();

  // "meshvk process 1, runtime ..." names the process of a job of several that wrote it.
  for (const auto& [pid, name] : process_names_) {
    const std::string_view prefix = "meshvk process ";
    if (name.rfind(prefix, 0) != 0) continue;
    const size_t digits = name.find_first_not_of("0123456789", prefix.size());
    if (digits > prefix.size() && digits != std::string::npos && name[digits] == ',')
      load_.process = "process " + name.substr(prefix.size(), digits - prefix.size());
  }

  // Lanes that look like meshvk devices get their device number, so hovering a device in the
  // mesh view lights them up.
  for (size_t l = 0; l < data.lanes().size(); ++l) {
    const TraceLane& lane = data.lanes()[l];
    data.set_lane_device(static_cast<int>(l), device_in(lane.name));
    if (lane.name.rfind("pid ", 0) == 0 && process_names_.count(lane.runtime))
      data.set_lane_name(static_cast<int>(l), process_names_[lane.runtime] + " / " + lane.name);
  }

  // Flows: a start and a finish with the same id make one arrow.
  std::map<std::string, size_t> starts;
  for (const FlowEnd& end : flow_ends_) {
    // meshvk names both spans: no need to guess from timestamps.
    if (end.from && end.to) {
      if (end.phase != 's') continue;
      const auto from = span_of_id_.find(end.from);
      const auto to = span_of_id_.find(end.to);
      if (from != span_of_id_.end() && to != span_of_id_.end() && from->second != to->second)
        data.add_flow({from->second, to->second, end.wait});
      continue;
    }
    const size_t span = bind(data, end);
    if (span == SIZE_MAX) continue;
    if (end.phase == 's') {
      starts[end.id] = span;
    } else if (const auto it = starts.find(end.id); it != starts.end()) {
      if (it->second != span) data.add_flow({it->second, span, false});
      if (end.phase == 't')
        it->second = span;
      else
        starts.erase(it);
    }
  }
  if (data.empty() && load_.skipped > 0)
    load_.error =
        "no spans found: " + std::to_string(load_.skipped) + " events were not understood";
}

// The load proper, on text simdjson can read past the end of (SIMDJSON_PADDING bytes).
TraceLoad load_padded(sj::padded_string_view text, const TraceLimits& limits) {
  TraceLoad load;
  if (text.length() > limits.max_bytes) {
    load.error = "too large to load: " + mib(text.length()) + " of text, over the " +
                 mib(limits.max_bytes) + " limit on trace files";
    return load;
  }
  const size_t parse = parse_bytes(text.length());
  if (parse > limits.max_memory) {
    load.error = "too large to load: parsing " + mib(text.length()) + " of JSON takes up to " +
                 mib(parse) + ", over the " + mib(limits.max_memory) + " of memory allowed";
    return load;
  }
  Loader loader(load, limits, limits.max_memory - parse, text);
  if (std::string error = loader.parse(); !error.empty()) {
    load.data = TraceData{};  // a partial model is no use next to an error, and may be large
    load.error = std::move(error);
    return load;
  }
  loader.finish();
  return load;
}

}  // namespace

TraceLoad load_chrome_trace(std::string_view json, const TraceLimits& limits) {
  if (json.size() > limits.max_bytes) {
    TraceLoad load;
    load.error = "too large to load: " + mib(json.size()) + " of text, over the " +
                 mib(limits.max_bytes) + " limit on trace files";
    return load;
  }
  // simdjson reads in 64-byte blocks past the end, so the text goes into a padded copy (counted
  // by parse_bytes); the file loader reads straight into one instead.
  const sj::padded_string copy(json.data(), json.size());
  if (copy.data() == nullptr && !json.empty()) {
    TraceLoad load;
    load.error = "too large to load: out of memory for a copy of the text";
    return load;
  }
  return load_padded(copy, limits);
}

TraceLoad load_chrome_trace_file(const std::string& path, const TraceLimits& limits) {
  TraceLoad load;
  const auto fail = [&](std::string message) {
    load.error = std::move(message);
    return std::move(load);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail("cannot open " + path + ": " + std::strerror(errno));
  const struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail("cannot read " + path + ": " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return fail(path + ": is a directory, not a file");
  // Reads up to n bytes into `to`: how many there were; -1 (errno set) on an error.
  const auto read_up_to = [fd](char* to, size_t n) -> ssize_t {
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::read(fd, to + got, n - got);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return -1;
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    return static_cast<ssize_t>(got);
  };
  if (S_ISREG(st.st_mode) && st.st_size > 0) {
    const auto size = static_cast<uint64_t>(st.st_size);
    if (size > limits.max_bytes)
      return fail(path + ": too large to load: " + mib(size) + " of text, over the " +
                  mib(limits.max_bytes) + " limit on trace files");
    sj::padded_string text(static_cast<size_t>(size));
    if (text.data() == nullptr)
      return fail(path + ": too large to load: out of memory for its text");
    const ssize_t got = read_up_to(text.data(), text.size());
    if (got < 0) return fail("cannot read " + path + ": " + std::strerror(errno));
    if (static_cast<size_t>(got) != text.size())
      return fail("cannot read " + path + ": it changed size while being read");
    load = load_padded(text, limits);
  } else {
    // A pipe (--trace <(zcat trace.json.gz)), a device, or a file that does not know its size
    // (/proc): read to its end, as far as the limit.
    std::string text;
    char block[1 << 16];
    for (;;) {
      const ssize_t got = read_up_to(block, sizeof block);
      if (got < 0) return fail("cannot read " + path + ": " + std::strerror(errno));
      if (text.size() + static_cast<size_t>(got) > limits.max_bytes)
        return fail(path + ": too large to load: over the " + mib(limits.max_bytes) +
                    " limit on trace files");
      text.append(block, static_cast<size_t>(got));
      if (got < static_cast<ssize_t>(sizeof block)) break;
    }
    load = load_chrome_trace(text, limits);
  }
  load.data.source = path;
  if (!load.error.empty()) load.error = path + ": " + load.error;
  return load;
}

TraceLoad merge_trace_loads(std::vector<TraceLoad> loads) {
  if (loads.size() == 1) return std::move(loads.front());
  TraceLoad merged;
  if (loads.empty()) {
    merged.error = "no trace to open";
    return merged;
  }
  for (TraceLoad& load : loads)
    if (!load.error.empty()) return std::move(load);
  // Line the files up by their clock origins when every one has one; else as they are. Origins
  // past +-1e18 ns (30 years of uptime), or +-2e18 with an offset added, are no clock's: moving
  // spans (within +-2^53 ns) by their differences could overflow.
  // A file from a job of several processes says how far process 0's clock is ahead of its own
  // (clock_offset_ns, measured when the job started): on process 0's clock, its origin is the
  // sum. Offsets past +-1e18 ns are no clock's either.
  for (TraceLoad& l : loads)
    if (l.clock_origin_ns && l.clock_offset_ns && *l.clock_offset_ns >= -1'000'000'000'000'000'000 &&
        *l.clock_offset_ns <= 1'000'000'000'000'000'000 && *l.clock_origin_ns >= -1'000'000'000'000'000'000 &&
        *l.clock_origin_ns <= 1'000'000'000'000'000'000)
      *l.clock_origin_ns += *l.clock_offset_ns;
  const bool aligned = std::all_of(loads.begin(), loads.end(), [](const TraceLoad& l) {
    return l.clock_origin_ns && *l.clock_origin_ns >= -2'000'000'000'000'000'000 &&
           *l.clock_origin_ns <= 2'000'000'000'000'000'000;
  });
  int64_t earliest = 0;
  if (aligned) {
    earliest = *loads.front().clock_origin_ns;
    for (const TraceLoad& l : loads) earliest = std::min(earliest, *l.clock_origin_ns);
    merged.clock_origin_ns = earliest;
  }
  std::string sources;
  for (size_t i = 0; i < loads.size(); ++i) {
    TraceLoad& l = loads[i];
    const std::string label = l.process.empty() ? "file " + std::to_string(i + 1) : l.process;
    const int64_t shift = aligned ? *l.clock_origin_ns - earliest : 0;
    merged.data.append(l.data, shift, label + " / ");
    merged.data.losses += l.data.losses;
    merged.skipped += l.skipped;
    sources += (sources.empty() ? "" : ", ") + l.data.source;
  }
  merged.data.source = sources;
  return merged;
}

TraceLoad load_chrome_trace_files(const std::vector<std::string>& paths,
                                  const TraceLimits& limits) {
  std::vector<TraceLoad> loads;
  for (const std::string& path : paths) {
    loads.push_back(load_chrome_trace_file(path, limits));
    if (!loads.back().error.empty()) return std::move(loads.back());
  }
  return merge_trace_loads(std::move(loads));
}

}  // namespace inspector
