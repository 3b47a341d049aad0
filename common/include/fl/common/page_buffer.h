// PageBuffer: zero-filled memory taken straight from the kernel (an anonymous mapping).
//
// For buffers as large as a model. A page costs resident memory only once it is written, so a
// zero model or sum that is filled in part by part grows as it is filled; Release gives pages
// back before the whole buffer goes, so one large buffer can be turned into another with the two
// never resident at once; and freeing returns the memory to the system at once, where malloc
// may keep it for later (glibc raises its mmap threshold after large frees). Move-only.
#ifndef FL_COMMON_PAGE_BUFFER_H_
#define FL_COMMON_PAGE_BUFFER_H_

#include <cstddef>

namespace fl {

class PageBuffer {
 public:
  PageBuffer() = default;
  // `bytes` zero bytes, page-aligned; std::bad_alloc when the system refuses the mapping.
  explicit PageBuffer(size_t bytes);
  ~PageBuffer();
  PageBuffer(PageBuffer&& other) noexcept;
  PageBuffer& operator=(PageBuffer&& other) noexcept;
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }

  // Hands the whole pages inside [offset, offset + length) back to the system; they read as zero
  // afterwards and cost memory again only when written.
  void Release(size_t offset, size_t length);

  // Makes the pages of [offset, offset + length) resident now (MADV_POPULATE_WRITE), so that
  // later writes take no page faults; the bytes stay as they are, and other threads may write
  // meanwhile. Does nothing on kernels before 5.14.
  void Populate(size_t offset, size_t length);

  // Gives up ownership: the caller unmaps [data(), data() + MappedBytes(size())) with munmap.
  void* Detach();
  static size_t MappedBytes(size_t bytes);

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace fl

#endif  // FL_COMMON_PAGE_BUFFER_H_
