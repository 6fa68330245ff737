#include "profile/device_profiler.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

#include "meshvk/error.hpp"
#include "profile/hooks.hpp"
#include "profile/intern.hpp"
#include "profile/recorder.hpp"
#include "vk/check.hpp"

namespace meshvk::profile {

// ---- Slice ----

Slice::Slice(DeviceProfiler& owner, int device, VkCommandBuffer cb)
    : owner_(owner), device_(device), cb_(cb) {}

Slice::~Slice() {
  owner_.give_back(*this);
}

VkQueryPool Slice::pool_of(uint32_t query) const {
  return owner_.lanes_[device_].blocks[blocks_[query / kBlockQueries]]->handle();
}

uint32_t Slice::stamp(VkPipelineStageFlagBits stage) {
  if (used_ == blocks_.size() * kBlockQueries) {
    const uint32_t b = owner_.take_block(device_);
    if (b == kNoQuery) return kNoQuery;
    // Queries must be reset before they are written; the reset travels in the same buffer, so
    // a captured buffer resets its own queries on every replay.
    vkCmdResetQueryPool(cb_, owner_.lanes_[device_].blocks[b]->handle(), 0, kBlockQueries);
    blocks_.push_back(b);
  }
  const uint32_t q = used_++;
  vkCmdWriteTimestamp(cb_, stage, pool_of(q), q % kBlockQueries);
  return q;
}

size_t Slice::open(Kind kind, std::string_view name, uint64_t bytes, uint64_t flops, int src_device,
                   uint64_t src_value) {
  SpanRecord r;
  r.kind = kind;
  r.name = intern(name);
  const Context& ctx = context();
  r.op = *ctx.op ? ctx.op : ctx.collective;
  r.rule = ctx.rule;
  r.bytes = bytes;
  r.flops = flops;
  r.src_device = src_device;
  r.src_value = src_value;
  r.begin = stamp(VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT);
  spans_.push_back(r);
  return spans_.size() - 1;
}

void Slice::close(size_t span) {
  SpanRecord& r = spans_[span];
  if (r.begin == kNoQuery) return;
  r.end = stamp(owner_.end_stage_);
}

// ---- DeviceProfiler ----

namespace {
// Host threads are numbered in the order they first record a host span: lanes of the trace.
int host_thread() {
  static std::atomic<int> next{0};
  thread_local const int index = next.fetch_add(1);
  return index;
}
}  // namespace

DeviceProfiler::DeviceProfiler(Setup setup)
    : device_(setup.device), mutex_(setup.mutex), instance_(setup.instance) {
  valid_bits_ = device_.adapter().queue_families[device_.compute_family()].timestampValidBits;
  // lavapipe runs one command at a time, so a timestamp written at the top of the pipe after a
  // command is already its end. Any other stage makes it flush its rasterizer scene first, a
  // round trip to its worker threads costing microseconds per timestamp.
  if (device_.adapter().name.find("llvmpipe") != std::string::npos)
    end_stage_ = VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT;
  RuntimeLanes lanes;
  lanes.platform = setup.platform;
  lanes.adapter = device_.adapter().name;
  lanes_ = std::vector<Lane>(setup.streams.size());  // built in place: a Lane does not move
  for (size_t l = 0; l < setup.streams.size(); ++l) {
    const Setup::Stream& s = setup.streams[l];
    lanes_[l].timeline = s.timeline;
    lanes_[l].queue = static_cast<int>(s.queue->index);
    lanes_[l].device = s.device;
    lanes_[l].transfer = s.transfer;
    (s.transfer ? lanes.transfer_queues : lanes.queues).push_back(lanes_[l].queue);
  }
  calibrator_ =
      std::make_unique<Calibrator>(instance_, device_, *setup.streams.at(0).queue, valid_bits_);
  Recorder& rec = Recorder::get();
  runtime_ = rec.add_runtime(this, std::move(lanes));
  rec.start_from_environment();
}

DeviceProfiler::~DeviceProfiler() {
  try {
    flush();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshvk profile: reading back device timestamps at shutdown: %s\n",
                 e.what());
  }
  Recorder& rec = Recorder::get();
  const bool last = rec.remove_runtime(this);
  rec.write_trace_if_asked();
  if (last) rec.print_summary_if_asked();
  // Slices give their pools back to the lanes, so they go first.
  std::lock_guard lock(mutex_);
  staged_.reset();
  captured_.clear();
  for (Lane& lane : lanes_) lane.in_flight.clear();
}

void DeviceProfiler::setup_clock() {
  clock_ = calibrator_->calibrate();
  calibrated_at_ = now_ns();
  Recorder::get().set_clock(runtime_, clock_.source);
}

uint32_t DeviceProfiler::take_block(int device) {
  Lane& lane = lanes_[device];
  if (!lane.free_blocks.empty()) {
    const uint32_t b = lane.free_blocks.back();
    lane.free_blocks.pop_back();
    return b;
  }
  if (lane.blocks.size() >= kMaxBlocks) return kNoQuery;
  lane.blocks.push_back(std::make_unique<QueryPool>(device_.handle(), kBlockQueries));
  return static_cast<uint32_t>(lane.blocks.size() - 1);
}

void DeviceProfiler::give_back(Slice& slice) {
  std::lock_guard lock(mutex_);
  Lane& lane = lanes_[slice.device_];
  lane.free_blocks.insert(lane.free_blocks.end(), slice.blocks_.begin(), slice.blocks_.end());
}

std::shared_ptr<Slice> DeviceProfiler::begin(int lane, VkCommandBuffer cb) {
  if (valid_bits_ == 0) return nullptr;  // the queue family cannot write timestamps
  if (context().muted) return nullptr;   // an unsampled replay (Options::sample_replays)
  if (clock_.source.empty()) setup_clock();
  auto slice = std::make_shared<Slice>(*this, lane, cb);
  const Context& ctx = context();
  slice->program_ = ctx.program;
  slice->op_ = ctx.op;
  slice->rule_ = ctx.rule;
  slice->collective_ = ctx.collective;
  slice->recording_since_ = now_ns();
  return slice;
}

void DeviceProfiler::close(const std::shared_ptr<Slice>& slice, bool captured) {
  host_span("record", slice->recording_since_, now_ns(), device_of(slice->device_), 0);
  if (slice->used_ == 0) return;  // no span, no timestamp: nothing to read back
  slice->captured_ = captured;
  if (captured)
    captured_[slice->cb_] = slice;
  else
    staged_ = slice;
}

int DeviceProfiler::free_slot(Slice& slice) {
  for (size_t k = 0; k < slice.slot_used_.size(); ++k)
    if (!slice.slot_used_[k]) return static_cast<int>(k);
  if (slice.slot_used_.size() >= kMaxSlots) return -1;
  if (slice.slot_used_.size() == slice.slots_.size() * kSlotsPerBuffer)
    slice.slots_.push_back(std::make_unique<vk::Buffer>(
        device_, slice.slot_bytes() * kSlotsPerBuffer, VK_BUFFER_USAGE_TRANSFER_DST_BIT,
        device_.staging_memory_type(), true));
  slice.slot_used_.push_back(0);
  return static_cast<int>(slice.slot_used_.size() - 1);
}

DeviceProfiler::Submitted* DeviceProfiler::find(int device, uint64_t value) {
  for (Submitted& s : lanes_[device].in_flight)
    if (s.value == value) return &s;
  return nullptr;
}

void DeviceProfiler::submitting(int lane, VkCommandBuffer cb, uint64_t signal,
                                std::span<const uint64_t> need) {
  const int device = lane;
  poll_device(device);
  if (!flows_.empty()) resolve_flows();
  std::shared_ptr<Slice> slice;
  if (staged_ && staged_->cb_ == cb) {
    slice = std::move(staged_);
  } else if (const auto it = captured_.find(cb); it != captured_.end()) {
    slice = it->second;
  }
  if (!slice) return;
  Submitted s{
      .value = signal, .slice = slice, .replay = slice->captured_ && slice->submissions_ > 0};
  ++slice->submissions_;
  for (size_t d = 0; d < need.size(); ++d)
    if (need[d] && static_cast<int>(d) != device) s.waits.push_back({static_cast<int>(d), need[d]});
  if (slice->captured_) {
    // Run again without a replay's refresh saving the previous run: that run is overwritten.
    if (slice->in_pools_) {
      if (Submitted* previous = find(device, slice->in_pools_)) previous->lost = true;
      --unsaved_;
    }
    slice->in_pools_ = signal;
    ++unsaved_;
  }
  lanes_[device].in_flight.push_back(std::move(s));
}

bool DeviceProfiler::unsaved(VkCommandBuffer captured) const {
  const auto it = captured_.find(captured);
  return it != captured_.end() && it->second->in_pools_ != 0;
}

void DeviceProfiler::save(VkCommandBuffer cb, int lane, uint64_t signal, VkCommandBuffer captured) {
  const auto it = captured_.find(captured);
  if (it == captured_.end() || !it->second->in_pools_) return;
  Slice& slice = *it->second;
  // The captured buffer may have run on another lane of the device (its transfer stream).
  Submitted* run = find(slice.device_, slice.in_pools_);
  slice.in_pools_ = 0;
  --unsaved_;
  if (!run) return;  // already read back
  const int k = free_slot(slice);
  if (k < 0) {  // kMaxSlots earlier runs still unread: the device is that far behind
    run->lost = true;
    return;
  }
  slice.slot_used_[k] = 1;
  run->slot = k;
  run->saved_on = lane;
  run->saved_by = signal;
  for (size_t b = 0; b < slice.blocks_.size(); ++b) {
    const uint32_t first = static_cast<uint32_t>(b) * kBlockQueries;
    const uint32_t n = std::min(kBlockQueries, slice.used_ - first);
    vkCmdCopyQueryPoolResults(cb, lanes_[slice.device_].blocks[slice.blocks_[b]]->handle(), 0, n,
                              slice.slot_buffer(k).handle(),
                              slice.slot_offset(k) + uint64_t{first} * 8, 8,
                              VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
  }
  VkMemoryBarrier to_host{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  to_host.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  to_host.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1,
                       &to_host, 0, nullptr, 0, nullptr);
}

void DeviceProfiler::release(VkCommandBuffer cb) {
  if (!captured_.empty()) captured_.erase(cb);
}

void DeviceProfiler::host_span(const char* name, int64_t start, int64_t end, int peer,
                               uint64_t value) {
  Span s;
  s.id = Recorder::get().next_span_id();
  s.runtime = runtime_;
  s.device = -1;
  s.kind = Kind::host;
  s.queue = host_thread();
  s.name = name;
  const Context& ctx = context();
  s.op = ctx.op;
  s.program = ctx.program;
  s.start_ns = start;
  s.end_ns = end;
  s.peer = peer;
  s.value = value;
  Recorder::get().emit(s);
}

// ---- hooks that need more than a line ----

WaitHook::~WaitHook() {
  if (!start_) [[likely]]
    return;
  profiler_.host_span("wait", start_, now_ns(), profiler_.device_of(device_), value_);
  try {
    profiler_.poll_if_idle();
  } catch (const std::exception&) {
    // Reading back is best effort here; flush() reports failures.
  }
}

}  // namespace meshvk::profile
