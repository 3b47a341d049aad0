#include "fl/common/page_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <new>
#include <utility>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; glibc before 2.35 lacks the name
#endif

namespace fl {
namespace {

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

size_t PageBuffer::MappedBytes(size_t bytes) {
  const size_t page = PageSize();
  return bytes == 0 ? page : (bytes + page - 1) / page * page;
}

PageBuffer::PageBuffer(size_t bytes) : size_(bytes) {
  void* p = mmap(nullptr, MappedBytes(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  data_ = p;
}

PageBuffer::~PageBuffer() {
  if (data_ != nullptr) munmap(data_, MappedBytes(size_));
}

PageBuffer::PageBuffer(PageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PageBuffer& PageBuffer::operator=(PageBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, MappedBytes(size_));
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void PageBuffer::Release(size_t offset, size_t length) {
  if (data_ == nullptr || offset >= size_) return;
  const size_t page = PageSize();
  size_t end = offset + length;
  if (end > size_ || end < offset) end = size_;
  // Whole pages only: a page partly outside the range may still hold live bytes.
  const size_t first = (offset + page - 1) / page * page;
  const size_t last = end == size_ ? MappedBytes(size_) : end / page * page;
  if (last <= first) return;
  // MADV_DONTNEED on private anonymous memory frees the pages now; they read back as zero.
  madvise(static_cast<char*>(data_) + first, last - first, MADV_DONTNEED);
}

void PageBuffer::Populate(size_t offset, size_t length) {
  if (data_ == nullptr || offset >= size_) return;
  const size_t page = PageSize();
  const size_t first = offset / page * page;
  const size_t end = length > size_ - offset ? size_ : offset + length;
  const size_t last = std::min(MappedBytes(size_), (end + page - 1) / page * page);
  // On kernels before 5.14 (EINVAL) the pages are simply faulted in by their first write, as
  // without this call; touching them here instead would race with those writes.
  (void)madvise(static_cast<char*>(data_) + first, last - first, MADV_POPULATE_WRITE);
}

void* PageBuffer::Detach() {
  size_ = 0;
  return std::exchange(data_, nullptr);
}

}  // namespace fl
