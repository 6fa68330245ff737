// Chrome trace JSON (the Trace Event Format that Perfetto UI and chrome://tracing read): one
// process per runtime, one thread per lane ("CPU 0", ..., "host"), "X" events for spans and
// "s"/"f" pairs for flows. Written through a temporary file renamed over the target, so a
// reader never sees half a trace.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <unordered_map>

#include <fcntl.h>
#include <unistd.h>

#include "io/atomic_file.hpp"
#include "meshvk/error.hpp"
#include "meshvk/profile.hpp"
#include "profile/recorder.hpp"
#include "runtime/process_group.hpp"

namespace meshvk::profile {

namespace {

// This process's place in a job of several (meshvk/distributed.hpp), or -1 when it runs alone.
int job_process() {
  const detail::ProcessGroup* group = detail::ProcessGroup::get();
  return group && group->size() > 1 ? group->rank() : -1;
}

// Lanes in a runtime's process: devices are threads 0..n-1 (their transfer streams 3000 + the
// device), host threads 1000 + the order in which they first recorded a host span, and the
// recording of each device's command buffers 2000 + the device. Recording gets lanes of its own
// because several recordings may be open at once (a collective records every member's step before
// submitting them) and spans sharing a lane must nest.
constexpr int kHostTid = 1000;
constexpr int kRecordTid = 2000;
constexpr int kTransferTid = 3000;

bool is_record(const Span& s) {
  return s.device < 0 && std::strcmp(s.name, "record") == 0 && s.peer >= 0;
}

int tid_of(const Span& s) {
  if (s.device >= 0) return s.transfer ? kTransferTid + s.device : s.device;
  return is_record(s) ? kRecordTid + s.peer : kHostTid + s.queue;
}

void append_string(std::string& out, std::string_view text) {
  out += '"';
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char u[8];
          std::snprintf(u, sizeof u, "\\u%04x", c);
          out += u;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

// Microseconds with nanosecond digits, as Chrome's "ts" and "dur" expect.
void append_us(std::string& out, int64_t ns) {
  char s[48];
  const int64_t whole = ns / 1000, frac = ns % 1000;
  if (ns < 0 && frac != 0)
    std::snprintf(s, sizeof s, "-%" PRId64 ".%03" PRId64, -(ns / 1000), -frac);
  else
    std::snprintf(s, sizeof s, "%" PRId64 ".%03" PRId64, whole, frac < 0 ? -frac : frac);
  out += s;
}

void append_lane_metadata(std::string& out, const RuntimeLanes& l, const std::set<int>& host_tids,
                          bool& comma) {
  auto meta = [&](const char* name, int tid, const std::string& args) {
    if (comma) out += ",\n";
    comma = true;
    out += "{\"name\":\"";
    out += name;
    out += "\",\"ph\":\"M\",\"pid\":" + std::to_string(l.runtime);
    if (tid >= -1) out += ",\"tid\":" + std::to_string(tid);
    out += ",\"args\":{" + args + "}}";
  };
  std::string process;
  const int job = job_process();
  append_string(process, (job >= 0 ? "meshvk process " + std::to_string(job) + ", runtime "
                                   : std::string("meshvk runtime ")) +
                             std::to_string(l.runtime) + ": " + l.adapter);
  meta("process_name", -2, "\"name\":" + process);
  meta("process_sort_index", -2, "\"sort_index\":" + std::to_string(l.runtime));
  auto lane = [&](int tid, const std::string& text, int order) {
    std::string name;
    append_string(name, text);
    meta("thread_name", tid, "\"name\":" + name);
    meta("thread_sort_index", tid, "\"sort_index\":" + std::to_string(order));
  };
  const int n = static_cast<int>(l.queues.size());
  lane(kHostTid, "host", -1000);
  for (const int tid : host_tids)
    if (tid >= kRecordTid) {
      const int d = tid - kRecordTid;
      lane(tid, "host: record " + l.platform + " " + std::to_string(d), 2 * n + d);
    } else if (tid != kHostTid) {
      lane(tid, "host thread " + std::to_string(tid - kHostTid), -1000 + tid - kHostTid);
    }
  for (int d = 0; d < n; ++d) lane(d, l.platform + " " + std::to_string(d), 2 * d);
  for (size_t d = 0; d < l.transfer_queues.size(); ++d)
    lane(kTransferTid + static_cast<int>(d), l.platform + " " + std::to_string(d) + " transfer",
         2 * static_cast<int>(d) + 1);
}

}  // namespace

std::string chrome_trace_json() {
  const std::vector<Event> all = events();
  const Counters c = counters();
  int64_t origin = 0;
  bool any = false;
  std::unordered_map<uint64_t, const Span*> by_id;
  std::map<int, std::set<int>> host_tids;  // by runtime
  for (const Event& e : all)
    if (const Span* s = std::get_if<Span>(&e)) {
      if (!any || s->start_ns < origin) origin = s->start_ns;
      any = true;
      by_id[s->id] = s;
      if (s->device < 0) host_tids[s->runtime].insert(tid_of(*s));
    }

  std::string out = "{\"displayTimeUnit\":\"ns\",\n\"otherData\":{";
  out += "\"clock_origin_ns\":" + std::to_string(origin);
  out += ",\"events\":" + std::to_string(c.events);
  out += ",\"dropped_events\":" + std::to_string(c.dropped_events);
  out += ",\"dropped_spans\":" + std::to_string(c.dropped_spans);
  out += ",\"dropped_flows\":" + std::to_string(c.dropped_flows);
  // Process 0's clock against this process's (runtime/process_group.hpp): the inspector adds it
  // to clock_origin_ns, so traces from several hosts, whose monotonic clocks differ, line up.
  if (const detail::ProcessGroup* group = detail::ProcessGroup::get(); group && group->size() > 1) {
    out += ",\"clock_offset_ns\":" + std::to_string(group->clock_offset_ns());
    out += ",\"clock_offset_uncertainty_ns\":" + std::to_string(group->clock_offset_uncertainty_ns());
  }
  const auto lanes = Recorder::get().lanes();
  for (const RuntimeLanes& l : lanes) {
    out += ",\"clock_runtime_" + std::to_string(l.runtime) + "\":";
    append_string(out, l.clock.empty() ? "host only" : l.clock);
  }
  out += "},\n\"traceEvents\":[\n";
  bool comma = false;
  for (const RuntimeLanes& l : lanes) append_lane_metadata(out, l, host_tids[l.runtime], comma);

  for (const Event& e : all) {
    if (const Span* s = std::get_if<Span>(&e)) {
      if (comma) out += ",\n";
      comma = true;
      out += "{\"ph\":\"X\",\"name\":";
      append_string(out, s->name);
      out += ",\"cat\":\"";
      out += kind_name(s->kind);
      out += "\",\"pid\":" + std::to_string(s->runtime) + ",\"tid\":" + std::to_string(tid_of(*s)) +
             ",\"ts\":";
      append_us(out, s->start_ns - origin);
      out += ",\"dur\":";
      append_us(out, s->end_ns - s->start_ns);
      out += ",\"args\":{\"id\":" + std::to_string(s->id);
      if (s->device >= 0) out += ",\"queue\":" + std::to_string(s->queue);
      if (s->transfer) out += ",\"transfer\":true";
      if (*s->op) {
        out += ",\"op\":";
        append_string(out, s->op);
      }
      if (*s->program) {
        out += ",\"program\":";
        append_string(out, s->program);
      }
      if (*s->rule) {
        out += ",\"rule\":";
        append_string(out, s->rule);
      }
      if (s->bytes) out += ",\"bytes\":" + std::to_string(s->bytes);
      if (s->flops) out += ",\"flops\":" + std::to_string(s->flops);
      if (s->peer >= 0) out += ",\"device\":" + std::to_string(s->peer);
      if (s->value) out += ",\"value\":" + std::to_string(s->value);
      out += "}}";
    } else {
      const Flow& f = std::get<Flow>(e);
      const auto from = by_id.find(f.from), to = by_id.find(f.to);
      if (from == by_id.end() || to == by_id.end()) continue;  // an end fell out of the buffer
      const Span& a = *from->second;
      const Span& b = *to->second;
      const char* cat = f.kind == FlowKind::transfer ? "transfer" : "wait";
      // Each end sits in the middle of its span, so it binds to that span and not a neighbour.
      for (int end = 0; end < 2; ++end) {
        const Span& s = end == 0 ? a : b;
        if (comma) out += ",\n";
        comma = true;
        out += std::string("{\"ph\":\"") + (end == 0 ? "s" : "f") + "\",";
        if (end == 1) out += "\"bp\":\"e\",";
        out += std::string("\"name\":\"") + cat + "\",\"cat\":\"" + cat +
               "\",\"id\":" + std::to_string(f.id);
        out += ",\"pid\":" + std::to_string(s.runtime) + ",\"tid\":" + std::to_string(tid_of(s)) +
               ",\"ts\":";
        append_us(out, s.start_ns + (s.end_ns - s.start_ns) / 2 - origin);
        out += ",\"args\":{\"from\":" + std::to_string(f.from) + ",\"to\":" + std::to_string(f.to) +
               "}}";
      }
    }
  }
  out += "\n]}\n";
  return out;
}

std::string trace_path_of_process(const std::string& path) {
  const int job = job_process();
  if (job < 0) return path;
  // Before the extension of the file's name (not of a folder's: "runs.d/trace" has none).
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find_last_of('.');
  const bool extension =
      dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  const std::string tag = ".process" + std::to_string(job);
  return extension ? path.substr(0, dot) + tag + path.substr(dot) : path + tag;
}

void write_chrome_trace(const std::string& path) {
  // Every process of a job runs the same program, so each would write the same file.
  io::write_file_atomically(trace_path_of_process(path), chrome_trace_json(),
                            "profile::write_chrome_trace");
}

}  // namespace meshvk::profile
