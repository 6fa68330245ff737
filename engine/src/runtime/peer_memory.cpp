#include "runtime/peer_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "meshvk/error.hpp"

namespace meshvk::runtime {

namespace {
std::string proc_fd_path(pid_t pid, int fd) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", static_cast<int>(pid), fd);
  return path;
}
}  // namespace

SharedFile::SharedFile(uint64_t bytes, const char* name) : size_(bytes) {
  fd_ = memfd_create(name, MFD_CLOEXEC);
  if (fd_ < 0)
    throw Error(std::string("out of memory: memfd_create for ") + std::to_string(bytes) +
                " bytes of device memory failed: " + std::strerror(errno));
  void* p = MAP_FAILED;
  if (ftruncate(fd_, static_cast<off_t>(bytes)) == 0)
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) {
    const int error = errno;
    close(fd_);
    throw Error("out of memory: " + std::to_string(bytes) +
                " bytes of device memory shared with the node's processes: " + std::strerror(error));
  }
  data_ = static_cast<uint8_t*>(p);
}

SharedFile::~SharedFile() {
  munmap(data_, size_);
  close(fd_);
}

PeerFile::PeerFile(int process, pid_t pid, int fd) {
  const std::string path = proc_fd_path(pid, fd);
  const int own = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (own < 0 || fstat(own, &st) != 0 || st.st_size <= 0) {
    const int error = errno;
    if (own >= 0) close(own);
    throw Error("process " + std::to_string(process) + "'s device memory (" + path +
                ") cannot be opened: " + std::strerror(error) +
                " (has it ended?)");
  }
  void* p = mmap(nullptr, static_cast<uint64_t>(st.st_size), PROT_READ, MAP_SHARED, own, 0);
  const int error = errno;
  close(own);  // the mapping keeps the file
  if (p == MAP_FAILED)
    throw Error("process " + std::to_string(process) + "'s device memory cannot be mapped: " +
                std::strerror(error));
  data_ = static_cast<const uint8_t*>(p);
  size_ = static_cast<uint64_t>(st.st_size);
}

PeerFile::~PeerFile() {
  munmap(const_cast<uint8_t*>(data_), size_);
}

const uint8_t* PeerMappings::bytes_of(int process, pid_t pid, const PeerPiece& piece) {
  const Key key{process, piece.serial};
  auto it = files_.find(key);
  if (it == files_.end()) {
    auto file = std::make_unique<PeerFile>(process, pid, static_cast<int>(piece.fd));
    // Room first, then the new mapping: the least recently used go, never the one asked for.
    while (!ages_.empty() && mapped_ + file->size() > most_bytes_) {
      const auto old = files_.find(ages_.front());
      mapped_ -= old->second.file->size();
      files_.erase(old);
      ages_.pop_front();
    }
    mapped_ += file->size();
    ages_.push_back(key);
    it = files_.emplace(key, Entry{std::move(file), std::prev(ages_.end())}).first;
  } else {
    ages_.splice(ages_.end(), ages_, it->second.age);
  }
  const PeerFile& f = *it->second.file;
  if (piece.offset > f.size() || piece.bytes > f.size() - piece.offset)
    throw Error("internal: process " + std::to_string(process) + " sent a piece of " +
                std::to_string(piece.bytes) + " bytes at " + std::to_string(piece.offset) +
                " of a " + std::to_string(f.size()) + "-byte block");
  return f.data() + piece.offset;
}

}  // namespace meshvk::runtime
