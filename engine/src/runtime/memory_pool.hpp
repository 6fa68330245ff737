#pragma once
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vk/device.hpp"
#include "runtime/peer_memory.hpp"
#include "vk/external_memory.hpp"

namespace meshvk::runtime {

constexpr uint64_t kUnbounded = std::numeric_limits<uint64_t>::max();

// A piece of one of a pool's blocks. Every block is one VkBuffer, so a piece is (buffer, offset).
struct Allocation {
  VkBuffer buffer = VK_NULL_HANDLE;
  uint64_t offset = 0;
  uint64_t size = 0;
  int block = -1;
};

// What the pools of one adapter (VkDevice) hold together. By default its virtual devices share
// its memory, as JAX's CPU devices share the host's: `limit` bounds their sum and no device has a
// budget of its own. With a budget per device (RuntimeOptions::memory_per_device,
// MESHVK_MEMORY_PER_DEVICE) each pool's budget bounds it and `limit` is kUnbounded; the sum is
// still counted, for errors.
struct AdapterMemory {
  uint64_t limit = kUnbounded;
  std::string limit_origin;  // how `limit` was chosen ("90% of its 8.00 GiB device-local heap")
  uint64_t used = 0;         // by arrays, over the adapter's pools
  uint64_t spare = 0;        // released dedicated blocks the pools keep for reuse
  int devices = 0;           // this process's virtual devices drawing on it
};

// One virtual device's memory, sub-allocated first-fit from a few large VkDeviceMemory blocks;
// requests of half a block or more get a block of their own. What it holds (arrays and spare
// blocks) stays within its own budget and, with the other pools of its adapter, within the
// adapter's limit.
class MemoryPool {
 public:
  // `exportable`: blocks are allocated exportable as opaque fds, so that other VkDevices of the
  // runtime can read and write them (view_on). `budget`: kUnbounded when the device shares the
  // adapter's memory.
  MemoryPool(vk::Device& device, int device_id, uint64_t budget,
             std::shared_ptr<AdapterMemory> adapter, bool exportable = false);

  // Nothing when the request does not fit the budget or the adapter's limit (after letting go
  // of this pool's spare blocks); throws Error when the adapter itself refuses the memory.
  std::optional<Allocation> try_allocate(uint64_t bytes);
  void free(const Allocation& allocation);
  // Frees the spare blocks kept for reuse; returns whether there were any.
  bool release_spares();
  // The allocation's block as a buffer of `importer`, another VkDevice of the same physical
  // device (vk::can_share_opaque_fd): the same bytes at the same offset. Imported on first use
  // and kept with the block, so it lives as long as any allocation in it.
  VkBuffer view_on(const Allocation& allocation, const vk::Device& importer);
  // The allocation's bytes as the host sees them, where device memory is host memory
  // (vk::Device::device_memory_is_host_memory); else null.
  const uint8_t* host_pointer(const Allocation& allocation) const;
  // From now on, blocks are memfds the node's other processes can map (runtime/peer_memory.hpp);
  // only where device memory is host memory and the device imports host pointers.
  void share_with_processes();
  // Where `bytes` at `offset` of the allocation's block (the offsets its VkBuffer's copies use)
  // lie for another process; nothing where the block is not shared.
  std::optional<PeerPiece> peer_piece(const Allocation& allocation, uint64_t offset,
                                      uint64_t bytes) const;

  // Its own budget; kUnbounded when it shares the adapter's (adapter().limit).
  uint64_t budget() const { return budget_; }
  const AdapterMemory& adapter() const { return *adapter_; }
  uint64_t used() const { return used_; }
  // The most used() was since the pool began or reset_peak().
  uint64_t peak() const { return peak_; }
  void reset_peak() { peak_ = used_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t aligned(uint64_t bytes) const {
    return (std::max<uint64_t>(bytes, 1) + alignment_ - 1) / alignment_ * alignment_;
  }

 private:
  struct Block {
    // Device memory of its own, or a file shared with the node's processes imported by pointer
    // (imported is destroyed before file: declared after it).
    std::unique_ptr<vk::Buffer> buffer;
    std::unique_ptr<SharedFile> file;
    std::unique_ptr<vk::ImportedBuffer> imported;
    uint64_t size = 0;
    uint64_t serial = 0;
    VkBuffer handle() const { return buffer ? buffer->handle() : imported->handle(); }
    const void* host() const { return buffer ? buffer->mapped() : file->data(); }
    std::map<uint64_t, uint64_t> free_ranges;  // offset -> size, coalesced
    bool dedicated = false;
    std::map<const vk::Device*, std::unique_ptr<vk::ImportedBuffer>> views;  // see view_on
  };
  std::optional<Allocation> carve(int block_index, uint64_t bytes);
  int add_block(uint64_t bytes, bool dedicated);
  int place(std::unique_ptr<Block> block);
  // Whether `bytes` more fit both limits, counting spare blocks as held.
  bool fits(uint64_t bytes) const;
  void drop_oldest_spare();

  vk::Device& device_;
  int device_id_;
  bool exportable_;
  bool shared_with_processes_ = false;
  uint64_t next_serial_ = 1;
  uint64_t budget_;
  std::shared_ptr<AdapterMemory> adapter_;
  uint64_t used_ = 0;
  uint64_t peak_ = 0;
  uint64_t alignment_;
  uint64_t block_size_;
  std::vector<std::unique_ptr<Block>> blocks_;  // null where a dedicated block was released
  // Released dedicated blocks kept for the next request of their size: a 64 MiB array freed and
  // made again (every jit replay's outputs) must not pay for fresh pages each time. They count
  // as held, and go first when a request would not fit otherwise.
  std::vector<std::unique_ptr<Block>> spare_;
  uint64_t spare_bytes_ = 0;
};

}  // namespace meshvk::runtime
