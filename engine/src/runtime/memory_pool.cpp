#include "runtime/memory_pool.hpp"

#include <algorithm>
#include <string>

#include "meshvk/error.hpp"

namespace meshvk::runtime {

MemoryPool::MemoryPool(vk::Device& device, int device_id, uint64_t budget,
                       std::shared_ptr<AdapterMemory> adapter, bool exportable)
    : device_(device),
      device_id_(device_id),
      exportable_(exportable),
      budget_(budget),
      adapter_(std::move(adapter)) {
  const auto& limits = device.limits();
  alignment_ = std::max<uint64_t>(
      {256, limits.minStorageBufferOffsetAlignment, limits.minTexelBufferOffsetAlignment});
  // Big enough to amortize vkAllocateMemory, small enough that eight devices do not reserve
  // gigabytes for a few small arrays.
  const uint64_t preferred = device.adapter().is_cpu() ? (64ull << 20) : (256ull << 20);
  const uint64_t most = std::min(budget_, adapter_->limit);
  block_size_ = most < preferred ? aligned(most) : preferred;
}

bool MemoryPool::fits(uint64_t bytes) const {
  // Both sums stay within their limits, so the differences do not wrap.
  return bytes <= budget_ - used_ - spare_bytes_ &&
         bytes <= adapter_->limit - adapter_->used - adapter_->spare;
}

int MemoryPool::place(std::unique_ptr<Block> block) {
  for (size_t i = 0; i < blocks_.size(); ++i) {
    if (!blocks_[i]) {
      blocks_[i] = std::move(block);
      return static_cast<int>(i);
    }
  }
  blocks_.push_back(std::move(block));
  return static_cast<int>(blocks_.size() - 1);
}

int MemoryPool::add_block(uint64_t bytes, bool dedicated) {
  auto block = std::make_unique<Block>();
  block->size = bytes;
  if (shared_with_processes_) {
    const uint64_t align = std::max<uint64_t>(4096, device_.host_pointer_alignment());
    block->file = std::make_unique<SharedFile>((bytes + align - 1) / align * align, "meshvk-device");
    block->imported =
        std::make_unique<vk::ImportedBuffer>(device_, block->file->data(), block->file->size());
    // Unique within the process (its peers' caches key on it): the device, then a count.
    block->serial = static_cast<uint64_t>(device_id_) << 40 | next_serial_++;
  } else {
    // Device memory that is host memory is mapped (free there), so the staged transport between
    // processes can send straight out of it (host_pointer).
    block->buffer = std::make_unique<vk::Buffer>(device_, bytes, vk::kDeviceBufferUsage,
                                                 device_.device_memory_type(),
                                                 device_.device_memory_is_host_memory(), exportable_);
  }
  block->free_ranges[0] = bytes;
  block->dedicated = dedicated;
  return place(std::move(block));
}

std::optional<Allocation> MemoryPool::carve(int block_index, uint64_t bytes) {
  Block& b = *blocks_[block_index];
  for (auto it = b.free_ranges.begin(); it != b.free_ranges.end(); ++it) {
    if (it->second < bytes) continue;
    const uint64_t offset = it->first;
    const uint64_t rest = it->second - bytes;
    b.free_ranges.erase(it);
    if (rest) b.free_ranges[offset + bytes] = rest;
    used_ += bytes;
    peak_ = std::max(peak_, used_);
    adapter_->used += bytes;
    return Allocation{b.handle(), offset, bytes, block_index};
  }
  return std::nullopt;
}

void MemoryPool::drop_oldest_spare() {
  const uint64_t bytes = spare_.front()->size;
  spare_bytes_ -= bytes;
  adapter_->spare -= bytes;
  spare_.erase(spare_.begin());
}

bool MemoryPool::release_spares() {
  const bool any = !spare_.empty();
  while (!spare_.empty()) drop_oldest_spare();
  return any;
}

std::optional<Allocation> MemoryPool::try_allocate(uint64_t bytes) {
  bytes = aligned(bytes);
  const bool dedicated = bytes * 2 >= block_size_;
  if (dedicated) {
    // A spare of this size is already held: it changes from spare to used.
    for (auto it = spare_.begin(); it != spare_.end(); ++it) {
      if ((*it)->size != bytes) continue;
      std::unique_ptr<Block> block = std::move(*it);
      spare_.erase(it);
      spare_bytes_ -= bytes;
      adapter_->spare -= bytes;
      block->free_ranges.clear();
      block->free_ranges[0] = bytes;
      return carve(place(std::move(block)), bytes);
    }
  }
  while (!fits(bytes) && !spare_.empty()) drop_oldest_spare();
  if (!fits(bytes)) return std::nullopt;
  // One VkBuffer lives in one allocation, which Vulkan bounds by the heap's size (lavapipe's is
  // 2 GiB): within the budget, a larger piece still cannot be made.
  if (bytes > device_.device_heap_size())
    throw Error("one buffer of " + std::to_string(bytes) + " bytes is more than one allocation of the adapter's " +
                std::to_string(device_.device_heap_size()) + "-byte heap can hold");
  if (dedicated) return carve(add_block(bytes, true), bytes);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    if (!blocks_[i] || blocks_[i]->dedicated) continue;
    if (auto a = carve(static_cast<int>(i), bytes)) return a;
  }
  return carve(add_block(block_size_, false), bytes);
}

const uint8_t* MemoryPool::host_pointer(const Allocation& a) const {
  const void* base = blocks_[a.block]->host();
  return base ? static_cast<const uint8_t*>(base) + a.offset : nullptr;
}

void MemoryPool::share_with_processes() {
  if (!device_.device_memory_is_host_memory() || !device_.host_pointer())
    throw Error("internal: device memory shared with processes where it is not host memory");
  // Blocks made before would not be shared, and a transfer cannot tell in time.
  if (!blocks_.empty() || !spare_.empty())
    throw Error("internal: device memory shared with processes after it was allocated");
  shared_with_processes_ = true;
}

std::optional<PeerPiece> MemoryPool::peer_piece(const Allocation& a, uint64_t offset,
                                                uint64_t bytes) const {
  const Block& b = *blocks_[a.block];
  if (!b.file || offset > b.size || bytes > b.size - offset) return std::nullopt;
  return PeerPiece{b.serial, b.file->fd(), offset, bytes};
}

VkBuffer MemoryPool::view_on(const Allocation& a, const vk::Device& importer) {
  if (&importer == &device_) return a.buffer;
  Block& b = *blocks_[a.block];
  auto& view = b.views[&importer];
  if (!view)
    view = b.file ? std::make_unique<vk::ImportedBuffer>(importer, b.file->data(), b.file->size())
                  : std::make_unique<vk::ImportedBuffer>(importer, device_, b.buffer->memory(),
                                                         device_.device_memory_type());
  return view->handle();
}

void MemoryPool::free(const Allocation& a) {
  Block& b = *blocks_[a.block];
  used_ -= a.size;
  adapter_->used -= a.size;
  if (b.dedicated) {
    // Kept while this pool's spares stay within a quarter of its budget and the adapter's within
    // a quarter of its limit (the oldest go first).
    const uint64_t bytes = b.size;
    spare_bytes_ += bytes;
    adapter_->spare += bytes;
    spare_.push_back(std::move(blocks_[a.block]));
    while (!spare_.empty() && (spare_bytes_ > budget_ / 4 || adapter_->spare > adapter_->limit / 4))
      drop_oldest_spare();
    return;
  }
  auto [it, inserted] = b.free_ranges.emplace(a.offset, a.size);
  // Coalesce with the following and the preceding free range.
  auto next = std::next(it);
  if (next != b.free_ranges.end() && it->first + it->second == next->first) {
    it->second += next->second;
    b.free_ranges.erase(next);
  }
  if (it != b.free_ranges.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      b.free_ranges.erase(it);
    }
  }
}

}  // namespace meshvk::runtime
