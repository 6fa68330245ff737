// A runtime spanning several processes (meshvk/distributed.hpp): every process holds the same
// number of devices and runs the same program; work for another process's device is skipped
// (remote Recordings) except for the transfers between processes, which every process counts
// alike on the devices' peer timelines. Each process publishes the values its timelines reached
// in the node's shared memory, next to the rings the transfers are staged through (shared), or
// sends them as MPI messages beside the rings' bytes (staged, runtime/staged_link.hpp); the
// communication thread (runtime/communication.cpp) publishes and submits held work.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "meshvk/error.hpp"
#include "runtime/env.hpp"
#include "runtime/process_group.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::detail {

namespace {
// The progress table at the start of each process's segment: one value per timeline, then (at
// its end) the process's doorbell: a counter other processes raise and wake (a futex shared
// between processes) when they publish, so a communication thread waiting for their values
// sleeps until then instead of polling.
constexpr uint64_t kTableBytes = 64 << 10;
constexpr uint64_t kDoorbellOffset = kTableBytes - 64;
// Before the doorbell: the process's heartbeat (runtime/liveness.hpp), tick, progress and
// waiting, each written atomically by its communication thread and read by the others'.
constexpr uint64_t kHeartbeatOffset = kTableBytes - 128;

uint64_t* heartbeat_slot(uint8_t* segment) {
  return reinterpret_cast<uint64_t*>(segment + kHeartbeatOffset);
}

uint32_t* doorbell(uint8_t* segment) {
  return reinterpret_cast<uint32_t*>(segment + kDoorbellOffset);
}
void futex_wake(uint32_t* word) {
  syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}
void futex_wait(uint32_t* word, uint32_t seen, uint64_t timeout_ns) {
  const timespec t{static_cast<time_t>(timeout_ns / 1000000000),
                   static_cast<long>(timeout_ns % 1000000000)};
  syscall(SYS_futex, word, FUTEX_WAIT, seen, &t, nullptr, 0);
}
}  // namespace

void RuntimeState::join_processes(int local_devices) {
  local_count_ = local_devices;
  // Checked in every runtime, so that a misspelt value fails where it is set, not on a cluster.
  if (const auto forced = env_text("MESHVK_PROCESS_TRANSPORT")) {
    if (*forced == "shared")
      forced_between_ = BetweenProcesses::shared;
    else if (*forced == "staged")
      forced_between_ = BetweenProcesses::staged;
    else
      throw Error("MESHVK_PROCESS_TRANSPORT=" + *forced +
                  ": give shared (the node's shared memory) or staged (MPI messages, as between "
                  "nodes), or unset it");
  }
  ProcessGroup* group = ProcessGroup::get();
  if (!group && ProcessGroup::launched_by_mpirun()) {
    group = &ProcessGroup::initialize(-1, -1);
    // Every process runs the same program; like a terminal's one output, only process 0's
    // reaches standard output unless asked for (errors still reach standard error).
    if (group->rank() != 0 && !env_switch("MESHVK_ALL_RANKS_PRINT").value_or(false)) {
      std::fflush(stdout);
      if (std::freopen("/dev/null", "w", stdout) == nullptr)
        throw Error("process " + std::to_string(group->rank()) + ": cannot silence stdout");
    }
  }
  if (!group || group->size() == 1) return;
  process_ = group->rank();
  processes_ = group->size();
  liveness_ = &group->liveness();
  // Every process must hold as many devices: the mesh is process-major.
  const int32_t mine = local_devices;
  const std::vector<uint8_t> all =
      group->allgather(&mine, sizeof mine, "Runtime start: the devices of each process");
  for (int r = 0; r < processes_; ++r) {
    int32_t theirs = 0;
    std::copy_n(all.data() + r * sizeof theirs, sizeof theirs, reinterpret_cast<uint8_t*>(&theirs));
    if (theirs != mine)
      throw Error(
          "Runtime: process " + std::to_string(process_) + " has " + std::to_string(mine) +
          " devices but process " + std::to_string(r) + " has " + std::to_string(theirs) +
          "; give every process the same MESHVK_NUM_DEVICES (mpirun -x MESHVK_NUM_DEVICES=4)");
  }
  if (local_devices * processes_ > 64)
    throw Error("Runtime: " + std::to_string(processes_) + " processes of " +
                std::to_string(local_devices) + " devices make " +
                std::to_string(local_devices * processes_) +
                " devices, over meshvk's 64; give fewer devices per process");
}

void RuntimeState::share_memory() {
  ProcessGroup& group = *ProcessGroup::get();
  ring_bytes_ = env_unsigned("MESHVK_PEER_RING_MIB", 1, 4096, "MiB").value_or(64) << 20;
  if (uint64_t{static_cast<uint64_t>(num_timelines())} * 8 > kHeartbeatOffset)
    throw Error("internal: too many timelines for the progress table");
  if (!group.single_node() && forced_between_ == BetweenProcesses::shared)
    throw Error(
        "MESHVK_PROCESS_TRANSPORT=shared: the job's processes run on several nodes, "
        "which share no memory; use staged or unset it");
  between_processes_ = group.single_node() ? forced_between_.value_or(BetweenProcesses::shared)
                                           : BetweenProcesses::staged;
  // Every process makes the same streams (the adapters are alike), so timelines agree, and
  // moves bytes the same way.
  // And rings of one size: both sides of a transfer reserve the same offsets in them.
  const int32_t mine[3] = {num_timelines(), static_cast<int32_t>(between_processes_),
                           static_cast<int32_t>(ring_bytes_ >> 20)};
  const std::vector<uint8_t> all = group.allgather(
      mine, sizeof mine, "Runtime start: the streams and transport of each process");
  for (int r = 0; r < processes_; ++r) {
    int32_t theirs[3];
    std::memcpy(theirs, all.data() + r * sizeof mine, sizeof mine);
    if (theirs[0] != mine[0])
      throw Error("Runtime: process " + std::to_string(r) + " has other streams than process " +
                  std::to_string(process_) +
                  "; run every process on the same kind of adapter with the same settings "
                  "(MESHVK_TRANSFER_QUEUE, MESHVK_ADAPTERS)");
    if (theirs[1] != mine[1])
      throw Error("Runtime: process " + std::to_string(r) + " moves bytes between processes " +
                  (theirs[1] ? "staged" : "shared") + " but process " + std::to_string(process_) +
                  (mine[1] ? " staged" : " shared") +
                  "; give every process the same MESHVK_PROCESS_TRANSPORT (mpirun -x)");
    if (theirs[2] != mine[2])
      throw Error("Runtime: process " + std::to_string(r) + " has rings of " +
                  std::to_string(theirs[2]) + " MiB between processes but process " +
                  std::to_string(process_) + " of " + std::to_string(mine[2]) +
                  " MiB; give every process the same MESHVK_PEER_RING_MIB (mpirun -x)");
  }
  published_.assign(streams_.size(), 0);
  if (between_processes_ == BetweenProcesses::shared) {
    // MPI_COMM_TYPE_SHARED says one node, but the processes may still not share /dev/shm
    // (containers, namespaces): then staged, as between nodes, unless shared was asked for.
    const std::string failed =
        group.allocate_shared(kTableBytes + static_cast<uint64_t>(processes_ - 1) * ring_bytes_,
                              kTableBytes);
    if (!failed.empty()) {
      if (forced_between_ == BetweenProcesses::shared)
        throw Error("MESHVK_PROCESS_TRANSPORT=shared: " + failed + "; use staged or unset it");
      if (process_ == 0)
        std::fprintf(stderr,
                     "meshvk: %s; moving bytes between processes staged through MPI instead\n",
                     failed.c_str());
      between_processes_ = BetweenProcesses::staged;
    }
  }
  if (between_processes_ == BetweenProcesses::staged) {
    // Read here, not per transfer: a bad value is an Error of the set-up, not of a transfer
    // half recorded on every process.
    staged_zero_copy_ = env_switch("MESHVK_STAGED_ZERO_COPY").value_or(true);
    link_ = std::make_unique<StagedLink>(group, num_timelines(), ring_bytes_);
    send_notes_.resize(streams_.size());
    progress_sent_.assign(streams_.size(), 0);
    progress_told_.assign(streams_.size() * processes_, 0);
    for (auto& adapter : adapters_) {
      segment_views_.emplace_back();
      segment_views_.back().push_back(
          std::make_unique<vk::ImportedBuffer>(*adapter, link_->memory(), link_->bytes()));
    }
    return;
  }
  std::vector<uint64_t*> slots;
  for (int r = 0; r < processes_; ++r) {
    tables_.push_back(reinterpret_cast<uint64_t*>(group.segment(r)));
    slots.push_back(heartbeat_slot(group.segment(r)));
  }
  group.set_heartbeat_slots(std::move(slots));
  for (auto& adapter : adapters_) {
    segment_views_.emplace_back();
    for (int r = 0; r < processes_; ++r)
      segment_views_.back().push_back(
          std::make_unique<vk::ImportedBuffer>(*adapter, group.segment(r), group.segment_bytes()));
  }
  // Where device memory is host memory, the host moves and folds the bytes itself (see
  // host_transfers). Each process decides for itself: the values counted are the same.
  host_transfers_ =
      env_switch("MESHVK_HOST_TRANSFERS").value_or(true) &&
      std::all_of(adapters_.begin(), adapters_.end(),
                  [](const auto& a) { return a->device_memory_is_host_memory(); });
  if (host_transfers_)
    for (auto& s : streams_)
      if (!s->remote && is_peer_timeline(static_cast<int>(&s - streams_.data()))) s->host_run = true;
  peer_spin_ns_ = env_unsigned("MESHVK_PEER_SPIN_US", 0, 1000, "us").value_or(30) * 1000;
  share_device_memory();
}

void RuntimeState::share_device_memory() {
  // Each process offers a probe file; each maps every other's. Both rounds go through
  // allgathers, so every process reaches the same answer (the ring uses of a transfer depend on
  // it on both sides). The probe lives until every process has tried it.
  const bool wanted =
      host_transfers_ && env_switch("MESHVK_PEER_MAPPING").value_or(true) &&
      std::all_of(adapters_.begin(), adapters_.end(), [](const auto& a) { return a->host_pointer(); });
  std::optional<runtime::SharedFile> probe;
  if (wanted) {
    probe.emplace(4096, "meshvk-probe");
    const int64_t pid = getpid();
    std::memcpy(probe->data(), &pid, sizeof pid);
  }
  const int64_t mine[3] = {wanted, getpid(), probe ? probe->fd() : -1};
  const std::vector<uint8_t> all = exchange(mine, sizeof mine, "Runtime start: device memory the processes share");
  std::vector<int64_t> offers(3 * static_cast<size_t>(processes_));
  std::memcpy(offers.data(), all.data(), offers.size() * sizeof(int64_t));
  bool reached = true;
  for (int r = 0; r < processes_; ++r) {
    const int64_t* theirs = &offers[3 * static_cast<size_t>(r)];
    if (!theirs[0]) reached = false;
    if (!reached || r == process_) continue;
    try {
      const runtime::PeerFile file(r, static_cast<pid_t>(theirs[1]), static_cast<int>(theirs[2]));
      int64_t written = 0;
      std::memcpy(&written, file.data(), sizeof written);
      reached = written == theirs[1];
    } catch (const Error&) {
      reached = false;
    }
  }
  const int32_t ok = reached;
  const std::vector<uint8_t> answers = exchange(&ok, sizeof ok, "Runtime start: whether each process maps the others' memory");
  peer_mapping_ = true;
  for (int r = 0; r < processes_; ++r) {
    int32_t theirs = 0;
    std::memcpy(&theirs, answers.data() + r * sizeof theirs, sizeof theirs);
    peer_mapping_ = peer_mapping_ && theirs;
  }
  if (!peer_mapping_) return;
  for (int r = 0; r < processes_; ++r) pids_.push_back(static_cast<pid_t>(offers[3 * static_cast<size_t>(r) + 1]));
  // A 64 MiB block per device and a few dedicated ones: what a step's transfers read.
  peer_mappings_ = std::make_unique<runtime::PeerMappings>(uint64_t{1} << 30);
  for (int d = 0; d < num_devices_; ++d)
    if (is_local(d)) pools_[d]->share_with_processes();
}

std::optional<runtime::PeerPiece> RuntimeState::peer_piece(const DeviceBuffer& b, uint64_t offset,
                                                           uint64_t bytes) {
  std::lock_guard lock(mutex_);
  return pools_[b.device()]->peer_piece(b.allocation_, offset, bytes);
}

const uint8_t* RuntimeState::peer_bytes(int process, const runtime::PeerPiece& piece) {
  if (!peer_mappings_) throw Error("internal: a piece of another process's memory without peer mapping");
  return peer_mappings_->bytes_of(process, pids_[static_cast<size_t>(process)], piece);
}

uint8_t* RuntimeState::host_bytes(const DeviceBuffer& b) {
  std::lock_guard lock(mutex_);
  const uint8_t* base = pools_[b.device()]->host_pointer(b.allocation_);
  if (!base) throw Error("internal: a host transfer from device memory the host cannot reach");
  return const_cast<uint8_t*>(base);
}

uint8_t* RuntimeState::ring_memory(int src_process, int dst_process) {
  if (link_) throw Error("internal: a host transfer through the staged rings");
  uint64_t start = 0;
  ring_view(first_local_device(), src_process, dst_process, start);
  return ProcessGroup::get()->segment(src_process) + start;
}

std::vector<uint8_t> RuntimeState::exchange(const void* data, uint64_t bytes,
                                            const std::string& what) {
  if (!multi_process()) {
    const auto* p = static_cast<const uint8_t*>(data);
    return std::vector<uint8_t>(p, p + bytes);
  }
  return ProcessGroup::get()->allgather(data, bytes, what.c_str());
}

uint64_t* RuntimeState::progress_table(int process) const {
  return tables_[process];
}

void RuntimeState::publish_progress() {
  if (link_) {
    // Staged: each reached send's bytes go out, then the values, never past a send whose bytes
    // have not: the receiver takes a value of the timeline as "the bytes are here".
    for (size_t t = 0; t < streams_.size(); ++t) {
      const Stream& s = *streams_[t];
      if (s.remote || !is_peer_timeline(static_cast<int>(t))) continue;
      if (published_[t] == s.queued && progress_sent_[t] == published_[t]) continue;
      const uint64_t value = s.semaphore.value();
      published_[t] = value;
      auto& notes = send_notes_[t];
      // What each process was told of t: a send's data tells its destination only.
      uint64_t* told = &progress_told_[t * processes_];
      while (!notes.empty() && notes.front().value <= value) {
        const SendNote& n = notes.front();
        link_->send_data(n.dst_process, static_cast<int>(t), n.value, n.offset, n.bytes, n.from);
        told[n.dst_process] = std::max(told[n.dst_process], n.value);
        notes.pop_front();
      }
      const uint64_t tell = notes.empty() ? value : std::min(value, notes.front().value - 1);
      uint64_t everyone = tell;
      for (int p = 0; p < processes_; ++p) {
        if (p == process_) continue;
        if (tell > told[p]) {
          link_->send_progress(p, static_cast<int>(t), tell);
          told[p] = tell;
        }
        everyone = std::min(everyone, told[p]);
      }
      progress_sent_[t] = everyone;
    }
    for (size_t t = 0; t < streams_.size(); ++t)
      if (!streams_[t]->remote && !is_peer_timeline(static_cast<int>(t)))
        published_[t] = streams_[t]->semaphore.value();
    return;
  }
  uint64_t* table = progress_table(process_);
  bool any = false;
  for (size_t t = 0; t < streams_.size(); ++t) {
    const Stream& s = *streams_[t];
    if (s.remote || published_[t] == s.queued) continue;
    const uint64_t value = s.semaphore.value();
    if (value == published_[t]) continue;
    published_[t] = value;
    std::atomic_ref<uint64_t>(table[t]).store(value, std::memory_order_release);
    any = true;
  }
  if (!any) return;
  ProcessGroup& group = *ProcessGroup::get();
  for (int r = 0; r < processes_; ++r) {
    if (r == process_) continue;
    uint32_t* bell = doorbell(group.segment(r));
    std::atomic_ref<uint32_t>(*bell).fetch_add(1, std::memory_order_release);
    futex_wake(bell);
  }
}

void RuntimeState::heartbeat() {
  Liveness& live = *liveness_;
  if (!live.due()) return;
  // Local timeline values: they advance when this process's submissions complete.
  uint64_t timelines = 0;
  for (const auto& s : streams_)
    if (!s->remote) timelines += s->semaphore.value();
  timespec cpu{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
  const Liveness::Beat beat =
      live.beat(timelines, static_cast<uint64_t>(cpu.tv_sec) * 1'000'000'000ull +
                               static_cast<uint64_t>(cpu.tv_nsec));
  if (link_) {
    link_->send_heartbeat(beat.tick, beat.progress, beat.waiting);
    return;
  }
  ProcessGroup& group = *ProcessGroup::get();
  uint64_t* mine = heartbeat_slot(group.segment(process_));
  // Ending the job (ProcessGroup::abort marked it): the mark stays for the others to read.
  if (std::atomic_ref<uint64_t>(mine[2]).load(std::memory_order_relaxed) == Liveness::kEndingJob)
    return;
  std::atomic_ref<uint64_t>(mine[1]).store(beat.progress, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(mine[2]).store(beat.waiting, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(mine[0]).store(beat.tick, std::memory_order_release);
  for (int r = 0; r < processes_; ++r) {
    if (r == process_) continue;
    uint64_t* theirs = heartbeat_slot(group.segment(r));
    Liveness::Beat heard;
    heard.tick = std::atomic_ref<uint64_t>(theirs[0]).load(std::memory_order_acquire);
    heard.progress = std::atomic_ref<uint64_t>(theirs[1]).load(std::memory_order_relaxed);
    heard.waiting = std::atomic_ref<uint64_t>(theirs[2]).load(std::memory_order_relaxed);
    live.heard(r, heard);
  }
}

void RuntimeState::end_heartbeat() {
  ProcessGroup* group = ProcessGroup::get();
  if (!group || processes_ <= 1) return;
  // Staged, the goodbye said it; shared, the segment says it.
  if (!link_ && !tables_.empty()) {
    uint64_t* mine = heartbeat_slot(group->segment(process_));
    std::atomic_ref<uint64_t>(mine[2]).store(Liveness::kEnded, std::memory_order_relaxed);
    std::atomic_ref<uint64_t>(mine[0]).fetch_add(1, std::memory_order_release);
  }
  group->set_heartbeat_slots({});
  group->liveness().forget_all();
}

void RuntimeState::ring_own_doorbell() {
  if (link_) return;  // staged: no shared memory; the thread polls its messages
  uint32_t* bell = doorbell(ProcessGroup::get()->segment(process_));
  std::atomic_ref<uint32_t>(*bell).fetch_add(1, std::memory_order_release);
  futex_wake(bell);
}

void RuntimeState::wait_for_peers(uint64_t timeout_ns, uint64_t spin_ns) {
  uint32_t* bell = doorbell(ProcessGroup::get()->segment(process_));
  const uint32_t seen = std::atomic_ref<uint32_t>(*bell).load(std::memory_order_acquire);
  {
    // A value published since the caller looked has rung already: no wait.
    std::lock_guard lock(held_mutex_);
    if (drain_held()) return;
  }
  if (spin_ns) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(spin_ns);
    while (std::chrono::steady_clock::now() < until) {
      if (std::atomic_ref<uint32_t>(*bell).load(std::memory_order_acquire) != seen) return;
      std::this_thread::yield();
    }
  }
  futex_wait(bell, seen, timeout_ns);
}

bool RuntimeState::progress_published() const {
  for (size_t t = 0; t < streams_.size(); ++t) {
    if (!streams_[t]->remote && published_[t] < streams_[t]->queued) return false;
    if (link_ && !send_notes_[t].empty()) return false;
  }
  return true;
}

void RuntimeState::note_send(int timeline, uint64_t value, int dst_process, uint64_t offset,
                             uint64_t bytes, const uint8_t* from) {
  if (!link_) return;
  std::lock_guard lock(held_mutex_);
  auto& notes = send_notes_[timeline];
  if (!notes.empty() && notes.back().value >= value)
    throw Error("internal: sends between processes noted out of order");
  notes.push_back({value, dst_process, offset, bytes, from});
}

const uint8_t* RuntimeState::sendable_bytes(const DeviceBuffer& b, uint64_t offset, uint64_t bytes) {
  if (!link_ || !is_local(b.device()) || offset < b.offset() ||
      offset - b.offset() > b.capacity() || bytes > b.capacity() - (offset - b.offset()))
    return nullptr;
  if (!staged_zero_copy_) return nullptr;
  std::lock_guard lock(mutex_);
  const uint8_t* base = pools_[b.device()]->host_pointer(b.allocation_);
  if (!base) return nullptr;
  direct_sends.fetch_add(1);
  // offset counts from the VkBuffer's start, as the copy regions do.
  return base - b.offset() + offset;
}

// True when a message arrived or one of this process's completed (the link moves).
bool RuntimeState::exchange_staged() {
  const bool received = link_->receive();
  const size_t sending = link_->sends_in_flight();
  link_->sends_done();
  return received || link_->sends_in_flight() < sending;
}

void RuntimeState::wait_local_progress(uint64_t timeout_ns) {
  // Until a local stream with queued work moves, or (shared memory) another process rings, at
  // most timeout_ns. Polled in short sleeps: lavapipe's vkWaitSemaphores with WAIT_ANY over
  // several timelines wakes late, which cost milliseconds per hop between processes.
  std::vector<std::pair<const Stream*, uint64_t>> pending;
  {
    std::lock_guard lock(held_mutex_);
    for (size_t t = 0; t < streams_.size(); ++t) {
      const Stream& s = *streams_[t];
      if (s.remote || published_[t] >= s.queued) continue;
      pending.push_back({&s, published_[t] + 1});
    }
  }
  uint32_t* bell = link_ ? nullptr : doorbell(ProcessGroup::get()->segment(process_));
  const uint32_t rung = bell ? std::atomic_ref<uint32_t>(*bell).load(std::memory_order_acquire) : 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout_ns);
  while (true) {
    for (const auto& [s, value] : pending)
      if (s->semaphore.value() >= value) return;
    if (bell && std::atomic_ref<uint32_t>(*bell).load(std::memory_order_acquire) != rung) return;
    if (std::chrono::steady_clock::now() > deadline) return;
    std::this_thread::sleep_for(std::chrono::microseconds(pending.empty() ? 100 : 20));
  }
}

VkBuffer RuntimeState::ring_view(int virtual_device, int src_process, int dst_process,
                                 uint64_t& start) {
  if (link_) {
    // The sender's outbound ring, the receiver's inbound one: the same offsets within.
    start = src_process == process_ ? link_->outbound(dst_process) : link_->inbound(src_process);
    return segment_views_[adapter_of_[virtual_device]][0]->handle();
  }
  // The ring lives in the sender's segment, after its table, one per other process.
  start = kTableBytes +
          static_cast<uint64_t>(dst_process < src_process ? dst_process : dst_process - 1) *
              ring_bytes_;
  return segment_views_[adapter_of_[virtual_device]][src_process]->handle();
}

RuntimeState::RingRange RuntimeState::reserve_ring(int src_process, int dst_process,
                                                   uint64_t bytes) {
  std::lock_guard lock(mutex_);
  if (bytes > ring_bytes_ / 2)
    throw Error("internal: a transfer of " + std::to_string(bytes) +
                " bytes between processes exceeds half the ring");
  Ring& ring = rings_[{src_process, dst_process}];
  bytes = (bytes + 255) / 256 * 256;
  if (ring.head + bytes > ring_bytes_) ring.head = 0;
  RingRange range{ring.head, {}};
  const uint64_t end = ring.head + bytes;
  // Earlier transfers whose bytes lie there must have been read out first.
  for (auto it = ring.uses.begin(); it != ring.uses.end();) {
    if (it->start < end && range.offset < it->end) {
      range.waits.push_back(it->receive);
      it = ring.uses.erase(it);
    } else {
      ++it;
    }
  }
  ring.head = end;
  return range;
}

std::vector<Fence> RuntimeState::ring_readers(int src_process, int dst_process, uint64_t offset,
                                              uint64_t bytes) {
  std::lock_guard lock(mutex_);
  Ring& ring = rings_[{src_process, dst_process}];
  const uint64_t end = offset + (bytes + 255) / 256 * 256;
  std::vector<Fence> readers;
  for (auto it = ring.uses.begin(); it != ring.uses.end();) {
    if (it->start < end && offset < it->end) {
      readers.push_back(it->receive);
      it = ring.uses.erase(it);
    } else {
      ++it;
    }
  }
  return readers;
}

void RuntimeState::ring_read_by(int src_process, int dst_process, uint64_t offset, uint64_t bytes,
                                const Fence& receive) {
  std::lock_guard lock(mutex_);
  rings_[{src_process, dst_process}].uses.push_back(
      {offset, offset + (bytes + 255) / 256 * 256, receive});
}

}  // namespace meshvk::detail
