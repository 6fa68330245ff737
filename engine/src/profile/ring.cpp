#include "profile/ring.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

namespace meshvk::profile {

static_assert(std::is_trivially_copyable_v<Event>, "events are copied as bytes between threads");

namespace {
size_t power_of_two_at_least(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}
}  // namespace

Ring::Ring(size_t capacity) : mask_(power_of_two_at_least(capacity < 2 ? 2 : capacity) - 1) {
  seq_ = static_cast<uint64_t*>(std::calloc(mask_ + 1, sizeof(uint64_t)));
  events_ = static_cast<Event*>(std::malloc((mask_ + 1) * sizeof(Event)));
  if (!seq_ || !events_) {
    std::free(seq_);
    std::free(events_);
    throw std::bad_alloc();
  }
}

Ring::~Ring() {
  std::free(seq_);
  std::free(events_);
}

void Ring::push(const Event& event) {
  const uint64_t t = head_.fetch_add(1, std::memory_order_acq_rel);
  const size_t i = t & mask_;
  std::atomic_ref<uint64_t> seq(seq_[i]);
  seq.store(2 * t + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(static_cast<void*>(&events_[i]), &event, sizeof(Event));
  seq.store(2 * t + 2, std::memory_order_release);
}

uint64_t Ring::read(uint64_t from, std::vector<Event>& out, uint64_t& missed, size_t max) const {
  const uint64_t head = this->head();
  if (head > capacity() && from < head - capacity()) {
    missed += head - capacity() - from;
    from = head - capacity();
  }
  size_t taken = 0;
  uint64_t t = from;
  for (; t < head && taken < max; ++t) {
    const size_t i = t & mask_;
    std::atomic_ref<uint64_t> seq(seq_[i]);
    const uint64_t before = seq.load(std::memory_order_acquire);
    if (before < 2 * t + 2) break;  // still being written: read it next time
    if (before > 2 * t + 2) {       // overwritten by a later lap
      ++missed;
      continue;
    }
    alignas(Event) unsigned char bytes[sizeof(Event)];
    std::memcpy(bytes, static_cast<const void*>(&events_[i]), sizeof(Event));
    std::atomic_thread_fence(std::memory_order_acquire);
    if (seq.load(std::memory_order_relaxed) != before) {
      ++missed;
      continue;
    }
    Event e;
    std::memcpy(static_cast<void*>(&e), bytes, sizeof(Event));
    out.push_back(e);
    ++taken;
  }
  return t;
}

}  // namespace meshvk::profile
