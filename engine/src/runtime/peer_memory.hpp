#pragma once
// Device memory that the other processes of the node read in place. Where device memory is host
// memory (lavapipe) and the processes share a node, each pool block is a memfd this process maps
// and imports into Vulkan (VK_EXT_external_memory_host); a peer opens it by /proc/PID/fd/N and
// maps it read-only, so a transfer between processes is one copy (or one fold) straight out of
// the sender's buffer instead of two through the ring. No name exists anywhere: the pages go
// when the last process unmaps them, whatever ends the job.
#include <sys/types.h>

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <utility>

namespace meshvk::runtime {

// A memfd of `bytes`, mapped read-write.
class SharedFile {
 public:
  SharedFile(uint64_t bytes, const char* name);
  ~SharedFile();
  SharedFile(const SharedFile&) = delete;
  SharedFile& operator=(const SharedFile&) = delete;
  int fd() const { return fd_; }
  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  int fd_ = -1;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// Where a piece of a process's SharedFile lies, as a peer finds it: (process, file serial) names
// the file for the peer's cache, (pid, fd) opens it.
struct PeerPiece {
  uint64_t serial = 0;  // unique within the sending process, never reused
  int64_t fd = -1;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// Another process's SharedFile, mapped read-only.
class PeerFile {
 public:
  // Throws Error naming the process when its file cannot be opened or mapped.
  PeerFile(int process, pid_t pid, int fd);
  ~PeerFile();
  PeerFile(const PeerFile&) = delete;
  PeerFile& operator=(const PeerFile&) = delete;
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// The peers' files this process has mapped, by (process, serial). Used by the communication
// thread only. A sender frees its blocks without telling anyone; a mapping of a freed block only
// keeps its pages until evicted: past `most_bytes` the least recently used mappings go.
class PeerMappings {
 public:
  explicit PeerMappings(uint64_t most_bytes) : most_bytes_(most_bytes) {}
  // The piece's first byte; throws Error when it lies outside the peer's file.
  const uint8_t* bytes_of(int process, pid_t pid, const PeerPiece& piece);

 private:
  using Key = std::pair<int, uint64_t>;
  struct Entry {
    std::unique_ptr<PeerFile> file;
    std::list<Key>::iterator age;
  };
  uint64_t most_bytes_;
  uint64_t mapped_ = 0;
  std::map<Key, Entry> files_;
  std::list<Key> ages_;  // least recently used first
};

}  // namespace meshvk::runtime
