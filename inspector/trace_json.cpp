// Chrome's Trace Event Format: "X" complete events (ts and dur in microseconds), "B"/"E" pairs,
// "M" metadata naming processes and threads, and "s"/"t"/"f" flow events binding to the slice
// that encloses them on their thread. Lanes are (pid, tid) pairs; meshvk's lane names ("CPU 3",
// "host") tell which lane is which device.
#include "trace_json.hpp"

#include <simdjson.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace inspector {
namespace {

namespace sj = simdjson;
namespace od = simdjson::ondemand;

int64_t to_ns(double us) {
  if (!std::isfinite(us)) return 0;
  const double ns = us * 1000.0;
  // Far outside any real trace; clamping keeps the arithmetic below from overflowing.
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

// Value errors that mean "not the type this field should have" (or a number no double holds):
// the field keeps its fallback, as a reader of Chrome traces is expected to be lenient. Any other
// error is the text's and ends the load.
bool wrong_type(sj::error_code err) {
  return err == sj::INCORRECT_TYPE || err == sj::NUMBER_ERROR || err == sj::NUMBER_OUT_OF_RANGE;
}

sj::error_code read(od::value& value, std::optional<std::string_view>& out) {
  std::string_view text;
  const sj::error_code err = value.get_string().get(text);
  if (!err) out = text;
  return wrong_type(err) ? sj::SUCCESS : err;
}

sj::error_code read(od::value& value, std::string_view& out) {
  std::optional<std::string_view> text;
  const sj::error_code err = read(value, text);
  if (text) out = *text;
  return err;
}

sj::error_code read(od::value& value, double& out) {
  double number = 0;
  const sj::error_code err = value.get_double().get(number);
  if (!err) out = number;
  return wrong_type(err) ? sj::SUCCESS : err;
}

// The members of an event the loader understands. The views point into simdjson's string
// buffer, which holds every string of the document until the next parse.
struct Args {
  std::string_view name, op, program;
  std::optional<std::string_view> kind;
  double bytes = 0, flops = 0, peer = -1, id = 0, from = 0, to = 0;
};

struct Event {
  std::string_view ph, name, cat, bp;
  std::optional<std::string_view> id, bind_id;
  double pid = 0, tid = 0, ts = 0, dur = 0;
  Args args;
};

// One pass over the members, in whatever order they come; members not listed are skipped by
// simdjson without recursion however deep they nest.
sj::error_code read_args(od::object& object, Args& args) {
  for (auto member : object) {
    od::field field;
    std::string_view key;
    if (const auto err = std::move(member).get(field)) return err;
    if (const auto err = field.unescaped_key().get(key)) return err;
    od::value& value = field.value();
    sj::error_code err = sj::SUCCESS;
    if (key == "name")
      err = read(value, args.name);
    else if (key == "kind")
      err = read(value, args.kind);
    else if (key == "op")
      err = read(value, args.op);
    else if (key == "program")
      err = read(value, args.program);
    else if (key == "bytes")
      err = read(value, args.bytes);
    else if (key == "flops")
      err = read(value, args.flops);
    else if (key == "peer")
      err = read(value, args.peer);
    else if (key == "id")
      err = read(value, args.id);
    else if (key == "from")
      err = read(value, args.from);
    else if (key == "to")
      err = read(value, args.to);
    if (err) return err;
  }
  return sj::SUCCESS;
}

sj::error_code read_event(od::object& object, Event& event) {
  for (auto member : object) {
    od::field field;
    std::string_view key;
    if (const auto err = std::move(member).get(field)) return err;
    if (const auto err = field.unescaped_key().get(key)) return err;
    od::value& value = field.value();
    sj::error_code err = sj::SUCCESS;
    if (key == "ph")
      err = read(value, event.ph);
    else if (key == "name")
      err = read(value, event.name);
    else if (key == "cat")
      err = read(value, event.cat);
    else if (key == "bp")
      err = read(value, event.bp);
    else if (key == "id")
      err = read(value, event.id);
    else if (key == "bind_id")
      err = read(value, event.bind_id);
    else if (key == "pid")
      err = read(value, event.pid);
    else if (key == "tid")
      err = read(value, event.tid);
    else if (key == "ts")
      err = read(value, event.ts);
    else if (key == "dur")
      err = read(value, event.dur);
    else if (key == "args") {
      od::object args;
      err = value.get_object().get(args);
      if (!err)
        err = read_args(args, event.args);
      else if (wrong_type(err))
        err = sj::SUCCESS;  // "args" that is not an object: no args
    }
    if (err) return err;
  }
  return sj::SUCCESS;
}

// Builds the model from the events as simdjson streams them.
class Loader {
 public:
  Loader(TraceLoad& load, const TraceLimits& limits, size_t model_budget)
      : load_(load), limits_(limits), budget_(model_budget) {}

  // Empty on success, else the message for TraceLoad::error.
  std::string events(od::array& events) {
    for (auto element : events) {
      od::value value;
      if (const auto err = std::move(element).get(value)) return invalid(err);
      if (++count_ > limits_.max_events)
        return "too large to load: more than " + std::to_string(limits_.max_events) +
               " events (the limit on events in a trace)";
      od::object object;
      if (const auto err = value.get_object().get(object)) {
        if (!wrong_type(err)) return invalid(err);
        ++load_.skipped;  // an entry that is not an object is not an event
        continue;
      }
      Event event;
      if (const auto err = read_event(object, event)) return invalid(err);
      add(event);
      if (model_bytes_ > budget_)
        return "too large to load: the timeline for its first " + std::to_string(count_) +
               " events already needs more than the " + mib(limits_.max_memory) +
               " of memory allowed (text and parser included)";
    }
    return "";
  }

  void finish();

  static std::string invalid(sj::error_code err) {
    if (err == sj::MEMALLOC) return "too large to load: out of memory while parsing";
    return std::string("not valid JSON: ") + sj::error_message(err);
  }

 private:
  void add(const Event& e);

  TraceLoad& load_;
  const TraceLimits& limits_;
  size_t budget_;
  size_t count_ = 0;
  // What the model and the maps below take, roughly: every vector may hold twice what it uses.
  size_t model_bytes_ = 0;
  uint64_t order_ = 0;
  std::map<int64_t, std::string> process_names_;
  std::vector<FlowEnd> flow_ends_;
  std::map<std::pair<int64_t, int64_t>, std::vector<size_t>> open_begins_;  // "B" without "E"
  std::map<uint64_t, size_t> span_of_id_;  // meshvk's span ids (args.id) to spans
};

void Loader::add(const Event& e) {
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
    return;
  }
  if (ph == "X" || ph == "B") {
    TraceSpan span;
    span.id = ++order_;
    span.lane = data.lane_for_thread(pid, tid);
    if (span.lane < 0) {
      ++load_.skipped;
      return;
    }
    span.name = e.name;
    span.kind = span_kind_from(std::string(e.args.kind.value_or(e.cat)));
    span.op = e.args.op;
    span.program = e.args.program;
    span.start_ns = to_ns(e.ts);
    span.end_ns = ph == "X" ? span.start_ns + std::max<int64_t>(0, to_ns(e.dur)) : span.start_ns;
    span.bytes = to_count(e.args.bytes);
    span.flops = to_count(e.args.flops);
    span.peer = static_cast<int>(std::clamp(e.args.peer, -1.0, 1e6));
    // The span and its lane's index entry, and their strings.
    model_bytes_ += 2 * (sizeof(TraceSpan) + sizeof(size_t)) + span.name.size() + span.op.size() +
                    span.program.size();
    const size_t index = data.add_span(std::move(span));
    if (e.args.id > 0) {
      model_bytes_ += kNode;
      span_of_id_[to_count(e.args.id)] = index;
    }
    if (ph == "B") {
      model_bytes_ += kNode + 2 * sizeof(size_t);
      open_begins_[{pid, tid}].push_back(index);
    }
    return;
  }
  if (ph == "E") {
    // find, not [], so that "E" events for made-up threads cannot grow the map.
    const auto stack = open_begins_.find({pid, tid});
    if (stack == open_begins_.end() || stack->second.empty()) {
      ++load_.skipped;
      return;
    }
    data.set_span_end(stack->second.back(), to_ns(e.ts));
    stack->second.pop_back();
    return;
  }
  if (ph == "s" || ph == "t" || ph == "f") {
    FlowEnd end;
    end.id = e.id.value_or(e.bind_id.value_or(""));
    end.lane = data.lane_for_thread(pid, tid);
    if (end.lane < 0) return;
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
    return;
  }
  ++load_.skipped;
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
  od::parser parser;
  od::document doc;
  bool iterating = false;  // doc has text to point into
  const auto fail = [&](std::string message) {
    // Where simdjson stopped (past the first token: errors at the root have no better place),
    // so that a message about the text says where to look.
    const std::string_view invalid = "not valid JSON";
    const char* at = nullptr;
    if (iterating && message.rfind(invalid, 0) == 0 && !doc.current_location().get(at) &&
        at > text.data() && at <= text.data() + text.length())
      message.insert(invalid.size(), " near byte " + std::to_string(at - text.data()));
    load.data = TraceData{};  // a partial model is no use next to an error, and may be large
    load.error = std::move(message);
    return std::move(load);
  };
  if (const auto err = parser.iterate(text).get(doc)) return fail(Loader::invalid(err));
  iterating = true;
  Loader loader(load, limits, limits.max_memory - parse);
  const std::string not_trace =
      "not a Chrome trace: expected an array of events or an object with a \"traceEvents\" "
      "array";
  od::json_type type;
  if (const auto err = doc.type().get(type)) return fail(Loader::invalid(err));
  if (type == od::json_type::array) {
    od::array events;
    if (const auto err = doc.get_array().get(events)) return fail(Loader::invalid(err));
    if (std::string error = loader.events(events); !error.empty()) return fail(error);
  } else if (type == od::json_type::object) {
    od::object root;
    if (const auto err = doc.get_object().get(root)) return fail(Loader::invalid(err));
    bool found = false;
    // Every member, not just "traceEvents", so that the rest of the text is checked too.
    for (auto member : root) {
      od::field field;
      std::string_view key;
      if (const auto err = std::move(member).get(field)) return fail(Loader::invalid(err));
      if (const auto err = field.unescaped_key().get(key)) return fail(Loader::invalid(err));
      if (key == "otherData") {
        // meshvk's clock origin, so that traces of several processes line up; anything else
        // there (or an otherData that is not an object) is not needed.
        od::object other;
        if (field.value().get_object().get(other)) continue;
        for (auto entry : other) {
          od::field f;
          std::string_view name;
          if (std::move(entry).get(f) || f.unescaped_key().get(name)) break;
          int64_t origin = 0;
          if (name == "clock_origin_ns" && !f.value().get_int64().get(origin))
            load.clock_origin_ns = origin;
        }
        continue;
      }
      if (key != "traceEvents" || found) continue;
      od::array events;
      if (const auto err = field.value().get_array().get(events))
        return fail(wrong_type(err) ? not_trace : Loader::invalid(err));
      found = true;
      if (std::string error = loader.events(events); !error.empty()) return fail(error);
    }
    if (!found) return fail(not_trace);
  } else {
    return fail(not_trace);
  }
  // On-Demand reads only what is asked for; text after the value is still an error.
  if (const auto rest = doc.current_location(); rest.error() != sj::OUT_OF_BOUNDS)
    return fail("not valid JSON: more text after the trace's value");
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
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    load.error = "cannot open " + path;
    return load;
  }
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0 || static_cast<uint64_t>(size) > limits.max_bytes) {
    load.error =
        path + ": too large to load: over the " + mib(limits.max_bytes) + " limit on trace files";
    return load;
  }
  in.seekg(0);
  sj::padded_string text(static_cast<size_t>(size));
  if (text.data() == nullptr) {
    load.error = path + ": too large to load: out of memory for its text";
    return load;
  }
  in.read(text.data(), size);
  if (!in) {
    load.error = "cannot read " + path;
    return load;
  }
  load = load_padded(text, limits);
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
  // past +-1e18 ns (30 years of uptime) are no clock's: moving spans (within +-4e18 ns) by their
  // differences could overflow.
  const bool aligned = std::all_of(loads.begin(), loads.end(), [](const TraceLoad& l) {
    return l.clock_origin_ns && *l.clock_origin_ns >= -1'000'000'000'000'000'000 &&
           *l.clock_origin_ns <= 1'000'000'000'000'000'000;
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
