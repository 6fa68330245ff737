#pragma once
// A bounded ring of profile events that many threads append to without a lock. When it is full
// the oldest events are overwritten; readers (the trace export, live subscribers) notice and
// count them as missed. Memory is reserved up front but touched only as events arrive.
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "meshvk/profile.hpp"

namespace meshvk::profile {

class Ring {
 public:
  explicit Ring(size_t capacity);  // rounded up to a power of two
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  size_t capacity() const { return mask_ + 1; }
  // Every event ever pushed has a ticket 0, 1, 2, ...; head() is the next one.
  uint64_t head() const { return head_.load(std::memory_order_acquire); }

  void push(const Event& event);

  // Appends the events with tickets from `from` on (at most `max`) to `out`. Returns the ticket
  // to continue from; `missed` grows by the events overwritten before they could be read. Stops
  // early at an event a producer is still writing.
  uint64_t read(uint64_t from, std::vector<Event>& out, uint64_t& missed, size_t max) const;

 private:
  // Each slot's sequence number is 2 * ticket + 1 while the producer writes it and
  // 2 * ticket + 2 once it is complete (a seqlock), so a reader can tell a whole event from a
  // torn or overwritten one.
  uint64_t* seq_;  // calloc'd: pages are zeroed by the OS when first touched
  Event* events_;  // malloc'd: Event is trivially copyable
  size_t mask_;
  std::atomic<uint64_t> head_{0};
};

}  // namespace meshvk::profile
