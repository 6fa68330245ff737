// The profiler: device spans on every lane in dependency order, flows for every transfer of an
// all-gather, Chrome trace JSON that parses back to the same events, the ring buffer's drop
// count, atomic export, live subscription and summaries.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "kernels/launch.hpp"
#include "meshvk/meshvk.hpp"
#include "meshvk/profile.hpp"
#include "profile/device_profiler.hpp"
#include "profile/hooks.hpp"
#include "runtime/runtime_state.hpp"
#include "profile_checks.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
namespace prof = meshvk::profile;
namespace fs = std::filesystem;
using mv::P;

namespace {

// ---- a minimal JSON reader: enough to read a trace back ----

struct Json {
  std::variant<std::nullptr_t, bool, double, std::string, std::vector<Json>,
               std::map<std::string, Json>>
      v;
  const Json& operator[](const std::string& key) const {
    static const Json none;
    const auto* o = std::get_if<std::map<std::string, Json>>(&v);
    if (!o) return none;
    const auto it = o->find(key);
    return it == o->end() ? none : it->second;
  }
  bool has(const std::string& key) const {
    const auto* o = std::get_if<std::map<std::string, Json>>(&v);
    return o && o->count(key);
  }
  double num() const { return std::get<double>(v); }
  const std::string& str() const { return std::get<std::string>(v); }
  const std::vector<Json>& arr() const { return std::get<std::vector<Json>>(v); }
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : s_(text) {}
  Json parse() {
    Json j = value();
    space();
    if (i_ != s_.size()) fail("trailing text");
    return j;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(i_));
  }
  void space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void expect(char c) {
    space();
    if (i_ >= s_.size() || s_[i_] != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  Json value() {
    space();
    if (i_ >= s_.size()) fail("unexpected end");
    const char c = s_[i_];
    if (c == '{') return object();
    if (c == '[') return array();
    if (c == '"') return Json{string()};
    if (s_.compare(i_, 4, "true") == 0) return i_ += 4, Json{true};
    if (s_.compare(i_, 5, "false") == 0) return i_ += 5, Json{false};
    if (s_.compare(i_, 4, "null") == 0) return i_ += 4, Json{nullptr};
    return number();
  }
  Json object() {
    expect('{');
    std::map<std::string, Json> o;
    space();
    if (s_[i_] == '}') return ++i_, Json{o};
    for (;;) {
      space();
      std::string key = string();
      expect(':');
      o[key] = value();
      space();
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      expect('}');
      return Json{o};
    }
  }
  Json array() {
    expect('[');
    std::vector<Json> a;
    space();
    if (s_[i_] == ']') return ++i_, Json{a};
    for (;;) {
      a.push_back(value());
      space();
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      expect(']');
      return Json{a};
    }
  }
  std::string string() {
    if (s_[i_] != '"') fail("expected a string");
    ++i_;
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c == '\\') {
        const char e = s_[i_++];
        if (e == 'n')
          c = '\n';
        else if (e == 't')
          c = '\t';
        else if (e == 'u') {
          c = static_cast<char>(std::stoi(s_.substr(i_, 4), nullptr, 16));
          i_ += 4;
        } else
          c = e;
      }
      out += c;
    }
    if (i_ >= s_.size()) fail("unterminated string");
    ++i_;
    return out;
  }
  Json number() {
    size_t used = 0;
    const double d = std::stod(s_.substr(i_, 40), &used);
    if (used == 0) fail("expected a value");
    i_ += used;
    return Json{d};
  }
  const std::string& s_;
  size_t i_ = 0;
};

// ---- helpers ----

// The known program: all-gather inside shard_map, then a matmul, on 8 devices.
struct GatherMatmul {
  mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  std::function<mv::Array(const mv::Array&, const mv::Array&)> f;
  mv::Array x, w;
  GatherMatmul() {
    const mv::Mesh m = mesh;
    auto jitted = mv::jit(
        [m](const mv::Array& x, const mv::Array& w) {
          const auto gathered =
              mv::shard_map([](const mv::Array& v) { return mv::all_gather(v, "x", 0, true); }, m,
                            {P("x")}, P())(x);
          return mv::matmul(gathered, w);
        },
        mv::JitOptions{.name = "gather_matmul"});
    f = [jitted](const mv::Array& a, const mv::Array& b) { return jitted(a, b); };
    // Committed to device 0 first: a constant would be made on each device instead of moved, and
    // the trace's flows include this move's transfers.
    const mv::Array on_0 = mv::device_put(mv::arange(64.f * 32).reshape({64, 32}), mv::Sharding(mv::SingleDeviceSharding(0)));
    x = mv::device_put(on_0, mv::NamedSharding(mesh, P("x")));
    w = mv::device_put(mv::arange(32.f * 16).reshape({32, 16}), mv::NamedSharding(mesh, P()));
  }
};

}  // namespace

TEST(Profile, GatherThenMatmulGivesOrderedSpansAndFlowsOnEveryLane) {
  Profiling on;
  GatherMatmul p;  // its inputs' uploads are profiled too: the all-gather's sources
  const int rt = test_runtime_id();
  // Trace and one replay: both the first submission and a resubmitted captured buffer.
  for (int call = 0; call < 2; ++call) (void)p.f(p.x, p.w).to_host<float>();
  prof::flush();
  const auto events = prof::events();
  const auto spans = spans_of(events, rt);
  const auto flows = flows_of(events, rt);
  std::map<uint64_t, prof::Span> by_id;
  for (const auto& s : spans) by_id[s.id] = s;

  // Every device lane has the all-gather's copies, its collective steps and a matmul kernel.
  for (int d = 0; d < 8; ++d) {
    int copies = 0, steps = 0, matmuls = 0;
    for (const auto& s : spans) {
      if (s.device != d) continue;
      EXPECT_LE(s.start_ns, s.end_ns) << s.name;
      if (s.kind == prof::Kind::copy && std::string(s.op) == "all-gather") ++copies;
      if (s.kind == prof::Kind::collective && std::string(s.name) == "all_gather(one_shot)")
        ++steps;
      if (s.kind == prof::Kind::kernel && std::string(s.name).rfind("matmul", 0) == 0) ++matmuls;
    }
    EXPECT_GE(copies, 2 * 8) << "device " << d;  // 8 pieces per call, 2 calls
    EXPECT_GE(steps, 2) << "device " << d;
    EXPECT_GE(matmuls, 2) << "device " << d;
  }
  for (const auto& s : spans) {
    if (s.kind == prof::Kind::collective || std::string(s.name).rfind("matmul", 0) == 0) {
      EXPECT_EQ(std::string(s.program), "jit(gather_matmul)") << s.name;
    }
  }

  // A flow from every source to every destination of the all-gather, in each call, and no
  // consumer starting before its producer ended.
  std::map<std::pair<int, int>, int> gathered;
  for (const auto& f : flows) {
    ASSERT_TRUE(by_id.count(f.from) && by_id.count(f.to))
        << "flow " << f.id << " has an end outside the buffer";
    const prof::Span& from = by_id[f.from];
    const prof::Span& to = by_id[f.to];
    EXPECT_LE(from.end_ns, to.start_ns) << from.name << " on device " << from.device << " -> "
                                        << to.name << " on device " << to.device;
    // Between devices, or between a device's compute and transfer streams.
    EXPECT_TRUE(from.device != to.device || from.transfer != to.transfer)
        << from.name << " -> " << to.name;
    if (f.kind == prof::FlowKind::transfer && std::string(to.op) == "all-gather")
      ++gathered[{from.device, to.device}];
  }
  for (int src = 0; src < 8; ++src)
    for (int dst = 0; dst < 8; ++dst)
      if (src != dst) {
        EXPECT_GE((gathered[{src, dst}]), 2) << "no flow from device " << src << " to " << dst;
      }

  // On a device, the matmul of a call starts after that call's gather copies ended (which may
  // run on its transfer stream, published separately: hence in order of time).
  auto by_start = spans;
  std::stable_sort(by_start.begin(), by_start.end(), [](const prof::Span& a, const prof::Span& b) {
    return a.start_ns < b.start_ns;
  });
  for (int d = 0; d < 8; ++d) {
    int64_t last_copy_end = 0;
    for (const auto& s : by_start) {
      if (s.device != d) continue;
      if (s.kind == prof::Kind::copy && std::string(s.op) == "all-gather")
        last_copy_end = std::max(last_copy_end, s.end_ns);
      if (s.kind == prof::Kind::kernel && std::string(s.name).rfind("matmul", 0) == 0) {
        EXPECT_GT(last_copy_end, 0);
        EXPECT_GE(s.start_ns, last_copy_end) << "device " << d;
      }
    }
  }

  // Host spans: the trace, the replay, and waits naming the device waited on.
  std::set<std::string> host;
  for (const auto& s : spans)
    if (s.device < 0) host.insert(s.name);
  for (const char* name : {"trace", "replay", "record", "submit", "wait"})
    EXPECT_TRUE(host.count(name)) << name;
  EXPECT_FALSE(prof::clock_source(rt).empty());
}

// The op a line of program text names: its first word ("all-gather (all_gather) over ..." ->
// "all-gather"); "" for the headers (the jit's, a shard_map's), the inputs and the outputs. A
// shard_map's lines are indented a level deeper inside the jit's. Op lines say "op: what".
static std::string line_op(const std::string& line) {
  if (line.rfind("  ", 0) != 0 || line.find(": ") == std::string::npos) return "";
  const size_t at = line.find_first_not_of(' ');
  if (at == std::string::npos) return "";
  const std::string op = line.substr(at, line.find_first_of(" (:", at) - at);
  const bool io = (op.rfind("in", 0) == 0 || op.rfind("out", 0) == 0) &&
                  std::all_of(op.begin() + (op[0] == 'i' ? 2 : 3), op.end(),
                              [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  return io ? "" : op;
}

TEST(Profile, EveryDeviceSpanCarriesTheProgramOpItCameFrom) {
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const auto f = mv::jit(
      [mesh](const mv::Array& x, const mv::Array& w) {
        const auto gathered =
            mv::shard_map([](const mv::Array& v) { return mv::all_gather(v, "x", 0, true); }, mesh,
                          {P("x")}, P())(x);
        const auto y = mv::tanh(mv::matmul(gathered, w) * 0.01f + 1.0f);  // a fused chain
        // A reduction over the sharded dimension: local sums, then an all-reduce.
        return mv::sum(y, {0}) + mv::sum(mv::square(x), {0});
      },
      mv::JitOptions{.name = "ops"});
  const auto x =
      mv::device_put(mv::arange(64.f * 32).reshape({64, 32}), mv::NamedSharding(mesh, P("x")));
  const auto w =
      mv::device_put(mv::arange(32.f * 32).reshape({32, 32}), mv::NamedSharding(mesh, P()));
  (void)x.to_host<float>();
  (void)w.to_host<float>();

  Profiling on;
  const int rt = test_runtime_id();
  // The trace, then a replay (its input refresh says "jit input").
  for (int call = 0; call < 2; ++call) (void)f(x, w).to_host<float>();
  // Eager ops, outside any program.
  const auto key = mv::random_key(1);
  const auto u = mv::uniform(key, {16, 4}, mv::NamedSharding(mesh, P("x")));
  const auto t = mv::transpose(mv::exp(u) + 1.0f);
  const auto picked = mv::take(t, mv::array({2, 0}), 1);
  const auto moved = mv::device_put(u, mv::NamedSharding(mesh, P()));
  (void)mv::sum(picked).to_host<float>();
  (void)mv::matmul(moved, t).to_host<float>();
  prof::flush();
  const std::string text = f.lower(x, w).as_text();

  std::set<std::string> program_ops;  // what the program text names
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (const std::string op = line_op(line); !op.empty()) program_ops.insert(op);
  for (const char* op : {"all-gather", "dot_general", "fusion", "sum", "all-reduce"})
    EXPECT_TRUE(program_ops.count(op)) << op << " is not in\n" << text;

  std::set<std::string> jit_ops;
  std::map<std::string, std::set<std::string>> eager_ops;  // kernel or copy name -> ops
  int device_spans = 0;
  for (const auto& s : spans_of(prof::events(), rt)) {
    if (s.device < 0) continue;
    ++device_spans;
    const std::string op = s.op, name = s.name, program = s.program;
    EXPECT_FALSE(op.empty()) << name << " on device " << s.device << " in '" << program
                             << "' carries no op";
    if (program == "jit(ops)") {
      if (op == "jit input") {
        EXPECT_EQ(s.kind, prof::Kind::copy);
        continue;
      }
      jit_ops.insert(op);
      EXPECT_TRUE(program_ops.count(op))
          << name << " says op '" << op << "', which no line of the program names:\n"
          << text;
      if (s.kind == prof::Kind::kernel && name.rfind("matmul", 0) == 0) {
        EXPECT_EQ(op, "dot_general");
      }
      if (s.kind == prof::Kind::collective && name.rfind("all_gather", 0) == 0) {
        EXPECT_EQ(op, "all-gather");
      }
      if (s.kind == prof::Kind::collective && name.rfind("all_reduce", 0) == 0) {
        EXPECT_EQ(op, "all-reduce");
      }
    } else if (program.empty()) {
      eager_ops[name].insert(op);
    }
  }
  EXPECT_GT(device_spans, 0);
  // Every line of the program has spans.
  for (const std::string& op : program_ops) EXPECT_TRUE(jit_ops.count(op)) << op << " has no span";

  // Eager ops name themselves: the sampler, the transpose, the gather of take, the fused chains,
  // the reshard, the reduction, the product and the reads back to the host.
  std::set<std::string> seen;
  for (const auto& [name, ops] : eager_ops) seen.insert(ops.begin(), ops.end());
  for (const char* op :
       {"uniform", "transpose", "take", "fusion", "reshard", "sum", "dot_general", "to_host"})
    EXPECT_TRUE(seen.count(op)) << op << " is missing from the eager spans' ops";
}

TEST(Profile, ChromeTraceParsesBackToTheSameEvents) {
  Profiling on;
  GatherMatmul p;
  (void)p.f(p.x, p.w).to_host<float>();
  prof::flush();
  const auto events = prof::events();
  const std::string text = prof::chrome_trace_json();
  const Json trace = JsonReader(text).parse();
  const auto& list = trace["traceEvents"].arr();
  const int64_t origin = static_cast<int64_t>(trace["otherData"]["clock_origin_ns"].num());
  const int rt = test_runtime_id();

  std::map<uint64_t, const Json*> x_events;
  std::map<uint64_t, std::pair<const Json*, const Json*>> flow_ends;
  std::map<std::pair<int, int>, std::string> lane_names;
  for (const Json& e : list) {
    const std::string ph = e["ph"].str();
    if (ph == "X") x_events[static_cast<uint64_t>(e["args"]["id"].num())] = &e;
    if (ph == "s") flow_ends[static_cast<uint64_t>(e["id"].num())].first = &e;
    if (ph == "f") flow_ends[static_cast<uint64_t>(e["id"].num())].second = &e;
    if (ph == "M" && e["name"].str() == "thread_name")
      lane_names[{static_cast<int>(e["pid"].num()), static_cast<int>(e["tid"].num())}] =
          e["args"]["name"].str();
  }
  const std::string platform = test_runtime().platform();
  for (int d = 0; d < 8; ++d) EXPECT_EQ((lane_names[{rt, d}]), platform + " " + std::to_string(d));
  EXPECT_EQ((lane_names[{rt, 1000}]), "host");
  EXPECT_EQ((lane_names[{rt, 2003}]), "host: record " + platform + " 3");

  size_t spans = 0, flows = 0;
  for (const auto& e : events) {
    if (const auto* s = std::get_if<prof::Span>(&e)) {
      ++spans;
      ASSERT_TRUE(x_events.count(s->id))
          << "span " << s->id << " " << s->name << " missing from the JSON";
      const Json& j = *x_events[s->id];
      EXPECT_EQ(j["name"].str(), s->name);
      EXPECT_EQ(j["cat"].str(), prof::kind_name(s->kind));
      EXPECT_EQ(static_cast<int>(j["pid"].num()), s->runtime);
      // Device lanes are threads 0..7 (transfer streams 3000 + device), the host thread 1000 +
      // its index, recording 2000 + device.
      const int tid = s->device >= 0                     ? (s->transfer ? 3000 : 0) + s->device
                      : std::string(s->name) == "record" ? 2000 + s->peer
                                                         : 1000 + s->queue;
      EXPECT_EQ(static_cast<int>(j["tid"].num()), tid);
      EXPECT_EQ(std::llround(j["ts"].num() * 1000) + origin, s->start_ns);
      EXPECT_EQ(std::llround(j["dur"].num() * 1000), s->end_ns - s->start_ns);
      EXPECT_EQ(j["args"].has("op") ? j["args"]["op"].str() : "", s->op);
      EXPECT_EQ(j["args"].has("program") ? j["args"]["program"].str() : "", s->program);
      EXPECT_EQ(j["args"].has("bytes") ? static_cast<uint64_t>(j["args"]["bytes"].num()) : 0u,
                s->bytes);
    } else {
      const auto& f = std::get<prof::Flow>(e);
      ++flows;
      ASSERT_TRUE(flow_ends.count(f.id)) << "flow " << f.id << " missing from the JSON";
      const auto [start, finish] = flow_ends[f.id];
      ASSERT_TRUE(start && finish) << "flow " << f.id << " lacks its s or f end";
      EXPECT_EQ(static_cast<uint64_t>((*start)["args"]["from"].num()), f.from);
      EXPECT_EQ(static_cast<uint64_t>((*finish)["args"]["to"].num()), f.to);
      EXPECT_EQ((*finish)["bp"].str(), "e");
      EXPECT_EQ((*start)["cat"].str(), f.kind == prof::FlowKind::transfer ? "transfer" : "wait");
      // Each end lies within the span it belongs to.
      const Json& from = *x_events[f.from];
      EXPECT_GE((*start)["ts"].num(), from["ts"].num());
      EXPECT_LE((*start)["ts"].num(), from["ts"].num() + from["dur"].num() + 0.001);
    }
  }
  EXPECT_EQ(x_events.size(), spans);

  // Spans sharing a lane nest (Perfetto drops ones that overlap partly).
  std::map<std::pair<int, int>, std::vector<std::pair<int64_t, int64_t>>> lanes;
  for (const auto& [id, j] : x_events) {
    const int64_t ts = std::llround((*j)["ts"].num() * 1000),
                  dur = std::llround((*j)["dur"].num() * 1000);
    lanes[{static_cast<int>((*j)["pid"].num()), static_cast<int>((*j)["tid"].num())}].push_back(
        {ts, ts + dur});
  }
  for (auto& [lane, list] : lanes) {
    std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<int64_t> open;  // ends of the enclosing spans
    for (const auto& [start, end] : list) {
      while (!open.empty() && open.back() <= start) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(end, open.back()) << "lane " << lane.second << ": a span overlaps its neighbour";
      }
      open.push_back(end);
    }
  }
  EXPECT_EQ(flow_ends.size(), flows);
  EXPECT_GT(flows, 56u);
}

TEST(Profile, RingBufferOverflowCountsDrops) {
  Profiling on({.capacity = 64});
  const auto mesh = mv::make_mesh({8}, {"x"});
  for (int i = 0; i < 4; ++i) {
    const auto y = mv::device_put(mv::arange(64.f), mv::NamedSharding(mesh, P("x")));
    (void)(y * 2.f).to_host<float>();
  }
  prof::flush();
  const prof::Counters c = prof::counters();
  EXPECT_GT(c.events, 64u);
  EXPECT_EQ(c.dropped_events, c.events - 64);
  EXPECT_EQ(prof::events().size(), 64u);
  EXPECT_NE(prof::summarize().to_string().find("dropped: " + std::to_string(c.dropped_events) +
                                               " events"),
            std::string::npos);
}

TEST(Profile, ExportIsAtomic) {
  Profiling on;
  (void)(mv::arange(256.f) + 1.f).to_host<float>();
  prof::flush();
  const fs::path dir = fs::temp_directory_path() / ("meshvk_profile_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path target = dir / "trace.json";
  prof::write_chrome_trace(target.string());
  // Only the finished file is left, and it is whole.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"trace.json"});
  std::stringstream text;
  text << std::ifstream(target).rdbuf();
  EXPECT_NO_THROW(JsonReader(text.str()).parse());

  // A write that cannot finish (the target is a folder) leaves no temporary file behind and
  // throws an error naming the path.
  const fs::path blocked = dir / "blocked.json";
  fs::create_directories(blocked / "inside");
  try {
    prof::write_chrome_trace(blocked.string());
    FAIL() << "expected an error";
  } catch (const mv::Error& e) {
    EXPECT_NE(std::string(e.what()).find(blocked.string()), std::string::npos) << e.what();
  }
  names.clear();
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"blocked.json", "trace.json"}));
  EXPECT_TRUE(fs::exists(blocked / "inside"));
  fs::remove_all(dir);
}

TEST(Profile, OffRecordsNothing) {
  prof::stop();
  const uint64_t before = prof::counters().events;
  (void)(mv::arange(256.f) * 3.f).to_host<float>();
  prof::flush();
  EXPECT_EQ(prof::counters().events, before);
  EXPECT_FALSE(prof::enabled());
}

TEST(Profile, SubscribersSeeEventsLive) {
  Profiling on;
  prof::Subscription sub = prof::subscribe();
  (void)(mv::arange(256.f) * 3.f).to_host<float>();
  std::vector<prof::Event> got;
  sub.read(got);
  size_t device_spans = 0;
  for (const auto& e : got)
    if (const auto* s = std::get_if<prof::Span>(&e); s && s->device >= 0) ++device_spans;
  EXPECT_GT(device_spans, 0u);  // to_host waited, so the kernel's timestamps were read back
  EXPECT_EQ(sub.missed(), 0u);
  got.clear();
  EXPECT_EQ(sub.read(got), 0u);
}

TEST(Profile, SubscriberOnAnotherThreadSeesEveryEvent) {
  Profiling on;
  prof::Subscription sub = prof::subscribe();
  std::atomic<bool> done{false};
  std::vector<prof::Event> seen;
  // The inspector's UI thread: reads while the program runs, never blocking it.
  std::thread reader([&] {
    while (!done.load()) {
      sub.read(seen, 1000);
      std::this_thread::yield();
    }
  });
  GatherMatmul p;
  for (int call = 0; call < 3; ++call) (void)p.f(p.x, p.w).to_host<float>();
  prof::flush();
  done.store(true);
  reader.join();
  sub.read(seen);
  EXPECT_EQ(sub.missed(), 0u);
  EXPECT_EQ(seen.size(), prof::events().size());
}

TEST(Profile, SummaryReportsTimeByKindAndCollective) {
  Profiling on;
  GatherMatmul p;
  for (int call = 0; call < 2; ++call) (void)p.f(p.x, p.w).to_host<float>();
  prof::flush();
  const prof::Report r = prof::summarize();
  const prof::Summary* program = nullptr;
  for (const auto& s : r.programs)
    if (s.program == "jit(gather_matmul)") program = &s;
  ASSERT_NE(program, nullptr) << r.to_string();
  ASSERT_TRUE(program->by_collective.count("all_gather(one_shot)")) << r.to_string();
  const prof::Totals& gather = program->by_collective.at("all_gather(one_shot)");
  EXPECT_EQ(gather.count, 16u);                     // 8 steps per call
  EXPECT_EQ(gather.bytes, 2u * 8 * (64 * 32 * 4));  // 2 calls, each member copying all 8 pieces
  EXPECT_GT(gather.gbps(), 0);
  EXPECT_GT(program->by_kind.at("kernel").count, 0u);
  EXPECT_GT(r.overall.by_kind.at("host").count, 0u);
  EXPECT_NE(r.to_string().find("jit(gather_matmul)"), std::string::npos);
}

TEST(Profile, ALongRecordingTakesMoreQueryPools) {
  Profiling on;
  auto& rt = *test_runtime().state();
  const auto buffer = rt.allocate(3, 4096);
  {
    std::lock_guard lock(rt.mutex());
    auto rec = rt.begin(3);
    // 100 spans need 200 queries: four pools of 64.
    for (uint32_t i = 0; i < 100; ++i) {
      const prof::DeviceSpan span(rec.profile.get(), prof::Kind::copy, "fill", 4096);
      vkCmdFillBuffer(rec.cb, buffer->vk_buffer(), buffer->offset(), 4096, i);
      meshvk::kernels::barrier(rec.cb);
    }
    buffer->written_by(rt.submit(std::move(rec)));
  }
  prof::flush();
  int64_t previous_end = 0;
  int fills = 0;
  for (const auto& s : spans_of(prof::events(), test_runtime_id())) {
    if (s.device != 3 || std::string(s.name) != "fill") continue;
    ++fills;
    EXPECT_GE(s.start_ns, previous_end);  // one after another, in recording order
    EXPECT_GE(s.end_ns, s.start_ns);
    previous_end = s.end_ns;
  }
  EXPECT_EQ(fills, 100);
  EXPECT_EQ(prof::counters().dropped_spans, 0u);
}

TEST(Profile, MeasuredClockOffsetAgreesWithCalibratedTimestamps) {
  auto& rt = *test_runtime().state();
  std::lock_guard lock(rt.mutex());
  const uint32_t bits =
      rt.device().adapter().queue_families[rt.device().compute_family()].timestampValidBits;
  if (bits == 0) GTEST_SKIP() << "the compute queue family writes no timestamps";
  prof::Calibrator calibrator(rt.instance().handle(), rt.device(), rt.device().queue(0), bits);
  const prof::ClockMap measured = calibrator.measured();
  EXPECT_NE(measured.source.find("measured offset"), std::string::npos);
  // A tick value read now maps to about now.
  EXPECT_NEAR(static_cast<double>(measured.to_host(measured.ticks_at_sync)),
              static_cast<double>(prof::now_ns()), 1e9);
  if (!calibrator.calibrated_extension())
    GTEST_SKIP() << "no VK_EXT_calibrated_timestamps to compare with";
  const prof::ClockMap calibrated = calibrator.from_extension();
  // Both put the same tick on the host clock within the measuring submission's width.
  const uint64_t tick = measured.ticks_at_sync;
  EXPECT_NEAR(static_cast<double>(measured.to_host(tick)),
              static_cast<double>(calibrated.to_host(tick)), 2e6)
      << measured.source << " vs " << calibrated.source;
}

TEST(Profile, ClockMapUnwrapsNarrowCounters) {
  prof::ClockMap m;
  m.valid_bits = 32;
  m.period_ns = 2;
  m.ticks_at_sync = 0xFFFFFF00u;
  m.host_at_sync = 1'000'000;
  EXPECT_EQ(m.to_host(0xFFFFFF10u), 1'000'000 + 2 * 0x10);
  EXPECT_EQ(m.to_host(0x00000010u), 1'000'000 + 2 * 0x110);  // wrapped past 2^32
  EXPECT_EQ(m.to_host(0xFFFFFE00u), 1'000'000 - 2 * 0x100);  // before the sync point
}

TEST(Profile, TraceFlagIsTakenFromTheCommandLine) {
  std::string a0 = "sample", a1 = "--size", a2 = "8", a3 = "--trace";
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), nullptr};
  int argc = 4;
  EXPECT_FALSE(prof::trace_from_args(argc, argv));  // --trace without a path
  EXPECT_EQ(argc, 3);
  EXPECT_EQ(std::string(argv[2]), "8");
  EXPECT_FALSE(prof::enabled());
}

// Issue 31.7.3: the README says MESHVK_PROFILE=1 prints summaries; it printed nothing. A sample
// run with it prints profile::summarize() to stderr when its last runtime ends; without it,
// nothing.
TEST(Profile, EnvironmentVariablePrintsASummaryAtExit) {
  const char* dir = std::getenv("MESHVK_BIN_DIR");
  ASSERT_TRUE(dir && *dir) << "MESHVK_BIN_DIR is not set (ctest sets it)";
  const std::string sample = std::string(dir) + "/sharding_basics";
  ASSERT_TRUE(fs::exists(sample)) << sample;
  // stderr only (stdout to /dev/null), so the sample's own output cannot match. Under
  // AddressSanitizer the sample's exit reports 128 bytes a module unloaded at exit (the Vulkan
  // layer or loader) still holds, which LeakSanitizer can only call "<unknown module>": leak
  // checking is off for the child (ASan's other checks stay on; without ASan it is ignored).
  const auto stderr_of = [&](const std::string& env) {
    const std::string command = "env " + env +
                                " ASAN_OPTIONS=detect_leaks=0:quarantine_size_mb=32 timeout 120 " +
                                sample + " --size 64 2>&1 >/dev/null";
    FILE* p = popen(command.c_str(), "r");
    std::string output;
    if (!p) return output;
    char buf[4096];
    while (const size_t n = fread(buf, 1, sizeof buf, p)) output.append(buf, n);
    EXPECT_EQ(pclose(p), 0) << command << "\n" << output;
    return output;
  };
  const std::string with = stderr_of("MESHVK_PROFILE=1");
  for (const char* part : {"meshvk profile (MESHVK_PROFILE=1)", "all events\n", "by kind", "kernel",
                           "copy", "by kernel / copy", "\nevents "})
    EXPECT_NE(with.find(part), std::string::npos) << part << " in:\n" << with;
  EXPECT_GT(std::count(with.begin(), with.end(), '\n'), 5) << with;
  const std::string without = stderr_of("MESHVK_PROFILE=0");
  EXPECT_EQ(without.find("meshvk profile"), std::string::npos) << without;
}
