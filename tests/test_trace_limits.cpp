// Issue 13.5: the inspector's trace loader bounds the memory a hostile file can make it take,
// not just the file's size, and says so in its error.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "trace_json.hpp"

namespace {

// The peak resident memory of this process so far (VmHWM), in bytes; 0 where /proc lacks it.
size_t peak_rss() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

std::string span_event(int i) {
  return R"({"ph":"X","name":"matmul","cat":"kernel","pid":1,"tid":2,"ts":)" + std::to_string(i) +
         R"(,"dur":1,"args":{"kind":"kernel","op":"dot_general","bytes":4096,"id":)" +
         std::to_string(i + 1) + "}}";
}

}  // namespace

TEST(TraceLimits, TinyValuesCannotExhaustMemory) {
  // "[0,0,...]" (20 MB): one structural character per byte, the parser's worst case.
  std::string json = "[";
  for (int i = 0; i < 10000000; ++i) json += "0,";
  json += "0]";
  inspector::TraceLimits limits;
  limits.max_memory = size_t{16} << 20;
  const inspector::TraceLoad load = inspector::load_chrome_trace(json, limits);
  EXPECT_NE(load.error.find("too large to load"), std::string::npos) << load.error;
  EXPECT_NE(load.error.find("16 MiB of memory"), std::string::npos) << load.error;
  // Within the memory budget it is refused for its number of entries, and says the limit.
  limits.max_memory = size_t{1} << 30;
  limits.max_events = 1000000;
  const inspector::TraceLoad counted = inspector::load_chrome_trace(json, limits);
  EXPECT_NE(counted.error.find("more than 1000000 events"), std::string::npos) << counted.error;
  EXPECT_TRUE(counted.data.spans().empty());
  // And with no limit in the way it is valid JSON with no events in it.
  limits.max_events = size_t{1} << 24;
  const inspector::TraceLoad parsed = inspector::load_chrome_trace(json, limits);
  EXPECT_NE(parsed.error.find("no spans found"), std::string::npos) << parsed.error;
  // The text itself is limited too.
  limits.max_bytes = size_t{1} << 20;
  const inspector::TraceLoad big = inspector::load_chrome_trace(json, limits);
  EXPECT_NE(big.error.find("over the 1 MiB limit"), std::string::npos) << big.error;
}

TEST(TraceLimits, TheModelCountsAgainstTheBudget) {
  // Text small enough to parse within the budget, with more spans than the rest of it holds.
  std::string json = "[";
  for (int i = 0; i < 100000; ++i) json += (i ? "," : "") + span_event(i);
  json += "]";
  inspector::TraceLimits limits;
  limits.max_memory = size_t{96} << 20;
  const inspector::TraceLoad load = inspector::load_chrome_trace(json, limits);
  EXPECT_NE(load.error.find("96 MiB of memory"), std::string::npos) << load.error;
  EXPECT_TRUE(load.data.spans().empty());
  EXPECT_EQ(inspector::load_chrome_trace(json).data.spans().size(), 100000u);
}

TEST(TraceLimits, MalformedTextIsAnError) {
  const char* inputs[] = {
      "[1, 2, 3",
      "{\"traceEvents\":[{\"ph\":\"X\"}]",
      "[{\"ph\":\"X\",\"pid\":1,\"tid\":2}] trailing",
      "[{\"ph\":\"X\",\"name\":\"a\\uzzzz\"}]",
      "\xff\xfe\x00\x01",
  };
  for (const char* text : inputs) {
    const inspector::TraceLoad load = inspector::load_chrome_trace(text);
    EXPECT_NE(load.error.find("not valid JSON"), std::string::npos) << text << ": " << load.error;
  }
  // Nesting far deeper than any trace: read without recursion, and reported, not a crash.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_NE(inspector::load_chrome_trace(deep).error, "");
  const std::string open = std::string(100000, '[') + "{\"ph\":";
  EXPECT_NE(inspector::load_chrome_trace(open).error.find("not valid JSON"), std::string::npos);
  // Valid JSON of the wrong shape says what a trace is.
  EXPECT_NE(inspector::load_chrome_trace("{\"traceEvents\":3}").error.find("\"traceEvents\" array"),
            std::string::npos);
  EXPECT_NE(inspector::load_chrome_trace("\"trace\"").error.find("array of events"),
            std::string::npos);
}

TEST(TraceLimits, RealTracesStillLoad) {
  const std::string json =
      R"({"traceEvents":[{"ph":"M","name":"thread_name","pid":1,"tid":2,"args":{"name":"CPU 0"}},)"
      R"({"ph":"X","name":"k","pid":1,"tid":2,"ts":1,"dur":2,"args":{"kind":"kernel"}}]})";
  inspector::TraceLimits limits;
  limits.max_memory = size_t{1} << 20;
  const inspector::TraceLoad load = inspector::load_chrome_trace(json, limits);
  EXPECT_EQ(load.error, "");
  ASSERT_EQ(load.data.spans().size(), 1u);
  EXPECT_EQ(load.data.spans()[0].name, "k");
  EXPECT_EQ(load.data.lanes()[0].name, "CPU 0");
}

TEST(TraceLimits, ATraceOfTensOfMegabytesLoadsInModestMemory) {
  // ~48 MB of real-looking events: the old tree parser needed ~12 bytes per byte (~600 MB).
  std::string json = "{\"traceEvents\":[";
  for (int i = 0; i < 300000; ++i) json += (i ? "," : "") + span_event(i);
  json += "]}";
  const size_t before = peak_rss();
  const inspector::TraceLoad load = inspector::load_chrome_trace(json);
  const size_t after = peak_rss();
  EXPECT_EQ(load.error, "");
  EXPECT_EQ(load.data.spans().size(), 300000u);
  // What the load added to the peak: the padded copy, simdjson's index and the model, well under
  // six times the text (the tree parser this replaced took about twelve).
  if (before > 0) {
    EXPECT_LT(after - before, 6 * json.size()) << json.size();
  }
  std::printf("trace of %zu MB: peak RSS grew by %zu MB\n", json.size() >> 20,
              (after - before) >> 20);
}

// Issue 31.5: malformed traces loaded silently. Each is now refused with a message that names the
// problem and, where there is one, the byte, the event and the field.
namespace {

std::string error_of(const std::string& text) {
  return inspector::load_chrome_trace(text).error;
}

// A trace as meshvk writes it (the events, then otherData), with `event` as its second event.
std::string trace_with(const std::string& event) {
  return R"({"traceEvents":[{"ph":"X","name":"a","pid":1,"tid":2,"ts":1,"dur":2},)" + event +
         R"(],"otherData":{"clock_origin_ns":5}})";
}

#define EXPECT_MESSAGE(text, part)                                                   \
  do {                                                                               \
    const std::string message_ = error_of(text);                                     \
    EXPECT_NE(message_.find(part), std::string::npos) << (text) << "\n" << message_; \
  } while (0)

}  // namespace

TEST(TraceMalformed, TextWithoutItsLastBrace) {
  const std::string whole = trace_with(R"({"ph":"X","name":"b","pid":1,"tid":2,"ts":5,"dur":1})");
  ASSERT_EQ(error_of(whole), "");
  // meshvk's traces end with otherData's object, so the text still ends with a '}'.
  const std::string cut = whole.substr(0, whole.size() - 1);
  EXPECT_MESSAGE(cut,
                 "not valid JSON: missing closing brace at byte " + std::to_string(cut.size()));
  EXPECT_MESSAGE(cut + "\n", "missing closing brace at byte " + std::to_string(cut.size()));
  // Cut inside the events.
  const std::string events = R"({"traceEvents":[{"ph":"X","ts":1,"dur":1,"pid":1,"tid":1})";
  EXPECT_MESSAGE(events, "missing closing bracket at byte " + std::to_string(events.size()));
  EXPECT_MESSAGE(R"([{"ph":"X","ts":1)", "missing closing brace at byte 17");
  EXPECT_MESSAGE(R"({"traceEvents":[{"ph":"X","ts":1}]]})", "at byte 34");
  EXPECT_MESSAGE(R"({"traceEvents":[{"ph":"X","ts":1}]}})", "more text after the trace");
}

TEST(TraceMalformed, RawNulAndControlBytes) {
  std::string text = trace_with(R"({"ph":"X","name":"b)" + std::string(1, '\0') +
                                R"(c","pid":1,"tid":2,"ts":5,"dur":1})");
  const size_t at = text.find('\0');
  EXPECT_MESSAGE(text, "not valid JSON: raw NUL byte at byte " + std::to_string(at));
  // Between values and after the trace, where On-Demand would not look.
  text = trace_with(std::string(1, '\0') + R"({"ph":"X","ts":5})");
  EXPECT_MESSAGE(text, "raw NUL byte at byte " + std::to_string(text.find('\0')));
  text = trace_with(R"({"ph":"X","ts":5})") + std::string(1, '\0');
  EXPECT_MESSAGE(text, "raw NUL byte at byte " + std::to_string(text.size() - 1));
  // Other control bytes: raw anywhere, and tabs and newlines inside strings.
  text = trace_with("{\"ph\":\"X\",\"name\":\"b\x01\"}");
  EXPECT_MESSAGE(text, "raw control byte 0x01 at byte " + std::to_string(text.find('\x01')));
  text = trace_with("{\"ph\":\"X\",\"name\":\"b\tc\"}");
  EXPECT_MESSAGE(text, "raw tab in a string at byte " + std::to_string(text.find('\t')));
  // Invalid UTF-8, with its place.
  text = trace_with("{\"ph\":\"X\",\"name\":\"b\xc3\x28\"}");
  EXPECT_MESSAGE(text, "invalid UTF-8 at byte " + std::to_string(text.find('\xc3')));
}

TEST(TraceMalformed, TimesOutOfRange) {
  // 1e400 is no double; 1e300 us is a double far past 2^53 ns (it showed "8000000000 s").
  EXPECT_MESSAGE(trace_with(R"({"ph":"X","name":"b","pid":1,"tid":2,"ts":1e400,"dur":1})"),
                 "'ts' 1e400 in event 1 is not a finite number");
  EXPECT_MESSAGE(trace_with(R"({"ph":"X","name":"b","pid":1,"tid":2,"ts":1e300,"dur":1})"),
                 "'ts' 1e300 in event 1 is outside -2^53..2^53 ns");
  EXPECT_MESSAGE(trace_with(R"({"ph":"X","name":"b","pid":1,"tid":2,"ts":-1e300,"dur":1})"),
                 "'ts' -1e300 in event 1 is outside -2^53..2^53 ns");
  EXPECT_MESSAGE(trace_with(R"({"ph":"X","name":"b","pid":1,"tid":2,"ts":1,"dur":1e300})"),
                 "'dur' 1e300 in event 1 is outside 0..2^53 ns");
  EXPECT_MESSAGE(trace_with(R"({"ph":"X","name":"b","pid":1,"tid":2,"ts":1,"dur":-5})"),
                 "'dur' -5 in event 1 is negative");
  EXPECT_MESSAGE(trace_with(R"({"ph":"X","name":"b","pid":1e999,"tid":2,"ts":1})"),
                 "'pid' 1e999 in event 1 is not a finite number");
  EXPECT_MESSAGE(
      trace_with(R"({"ph":"X","name":"b","pid":1,"tid":2,"ts":1,"args":{"bytes":-1e999}})"),
      "'bytes' -1e999 in the args of event 1 is not a finite number");
  // Flow and "E" events' times too; an "E" before its "B" is a negative duration.
  EXPECT_MESSAGE(trace_with(R"({"ph":"s","id":"f","pid":1,"tid":2,"ts":9.1e12})"),
                 "'ts' 9.1e12 in event 1 is outside");
  EXPECT_MESSAGE(
      trace_with(
          R"({"ph":"B","name":"b","pid":1,"tid":3,"ts":5},{"ph":"E","pid":1,"tid":3,"ts":4})"),
      "'ts' 4 in event 2 is before the start of the \"B\" it ends (event 1, ts 5)");
  // Numbers that are not JSON numbers, in members the loader does not read as well.
  EXPECT_MESSAGE(trace_with(R"({"ph":"X","ts":01})"), "not valid JSON");
  EXPECT_MESSAGE(trace_with(R"({"ph":"X","ts":1,"extra":[1,2,1e400]})"), "not a finite number");
  // The edges themselves load: 2^53 ns is 9007199254740.992 us.
  EXPECT_EQ(error_of(trace_with(R"({"ph":"X","name":"b","pid":1,"tid":2,"ts":-9007199254740.992,)"
                                R"("dur":9007199254740.992})")),
            "");
}

TEST(TraceMalformed, DuplicateKeys) {
  std::string events = "[";
  for (int i = 0; i < 12; ++i) events += R"({"ph":"X","name":"a","pid":1,"tid":2,"ts":1,"dur":2},)";
  const std::string dup = events + R"({"ph":"X","name":"a","pid":1,"tid":2,"ts":1,"ts":7}])";
  EXPECT_MESSAGE(dup,
                 "duplicate key \"ts\" in event 12 at byte " + std::to_string(dup.rfind("\"ts\"")));
  EXPECT_MESSAGE(trace_with(R"({"ph":"X","ts":1,"args":{"bytes":1,"bytes":2}})"),
                 "duplicate key \"bytes\" in the args of event 1");
  EXPECT_MESSAGE(R"({"traceEvents":[],"traceEvents":[{"ph":"X"}]})",
                 "duplicate key \"traceEvents\" at byte 18");
  EXPECT_MESSAGE(R"({"traceEvents":[],"otherData":{"clock_origin_ns":1,"clock_origin_ns":2}})",
                 "duplicate key \"clock_origin_ns\"");
  // In members the loader does not read too, and the same key spelled with an escape.
  EXPECT_MESSAGE(trace_with(R"({"ph":"X","ts":1,"extra":{"a":[{"k":1,"k":2}]}})"),
                 "duplicate key \"k\"");
  EXPECT_MESSAGE(trace_with(R"({"ph":"X","ts":1,"\u0074s":2})"), "duplicate key \"ts\" in event 1");
  // Many distinct keys are fine.
  std::string wide = R"({"ph":"X","ts":1,"extra":{)";
  for (int i = 0; i < 1000; ++i) wide += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
  EXPECT_EQ(error_of(trace_with(wide + "}}")), "");
}

TEST(TraceMalformed, EveryValueIsChecked) {
  // On-Demand skips what it is not asked for; the loader checks those parts too.
  EXPECT_MESSAGE(trace_with(R"({"ph":"X","ts":1,"extra":[1,tru]})"), "not valid JSON");
  EXPECT_MESSAGE(trace_with(R"({"ph":"X","ts":1,"extra":{"a" 1}})"), "not valid JSON");
  EXPECT_MESSAGE(trace_with(R"({"ph":"X","ts":1,"name":["\uzzzz"]})"), "not valid JSON");
  EXPECT_MESSAGE(R"({"traceEvents":[],"otherData":[nul]})", "not valid JSON");
  EXPECT_MESSAGE(R"({"metadata":{"x":[1,2,}, "traceEvents":[]})", "not valid JSON");
  EXPECT_MESSAGE(R"([{"ph":"X","ts":1}, 7, [falsy]])", "not valid JSON");
  // Deep nesting where the loader does not look: a limit, not a crash.
  EXPECT_MESSAGE(trace_with(R"({"ph":"X","ts":1,"extra":)" + std::string(5000, '[') +
                            std::string(5000, ']') + "}"),
                 "levels of nesting");
  // A clock origin that is no int64 of ns.
  EXPECT_MESSAGE(R"({"traceEvents":[],"otherData":{"clock_origin_ns":1.5}})",
                 "'clock_origin_ns' 1.5 in otherData");
}

TEST(TraceMalformed, PathsThatAreNotTraceFiles) {
  const std::string dir = ::testing::TempDir() + "meshvk-trace-dir-" + std::to_string(getpid());
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  EXPECT_EQ(inspector::load_chrome_trace_file(dir).error, dir + ": is a directory, not a file");
  EXPECT_EQ(inspector::load_chrome_trace_file(dir + "/missing.json").error,
            "cannot open " + dir + "/missing.json: No such file or directory");
  // A file's own problems come with its name.
  const std::string bad = dir + "/bad.json";
  std::ofstream(bad) << R"({"traceEvents":[{"ph":"X","ts":1e300}]})";
  EXPECT_EQ(inspector::load_chrome_trace_file(bad).error,
            bad + ": 'ts' 1e300 in event 0 is outside -2^53..2^53 ns (about 104 days)");
  // A pipe is read to its end, within the size limit.
  const std::string fifo = dir + "/pipe.json";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer(
      [&] { std::ofstream(fifo) << R"([{"ph":"X","name":"k","pid":1,"tid":2,"ts":1,"dur":2}])"; });
  const inspector::TraceLoad piped = inspector::load_chrome_trace_file(fifo);
  writer.join();
  EXPECT_EQ(piped.error, "");
  EXPECT_EQ(piped.data.spans().size(), 1u);
  // The loader stops reading past the limit: the writer then gets EPIPE, not a signal.
  signal(SIGPIPE, SIG_IGN);
  std::thread big_writer([&] { std::ofstream(fifo) << std::string(3 << 20, ' ') << "[]"; });
  inspector::TraceLimits limits;
  limits.max_bytes = size_t{2} << 20;
  EXPECT_EQ(inspector::load_chrome_trace_file(fifo, limits).error,
            fifo + ": too large to load: over the 2 MiB limit on trace files");
  big_writer.join();
  std::remove(fifo.c_str());
  std::remove(bad.c_str());
  rmdir(dir.c_str());
}
