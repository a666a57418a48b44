// Tensor: a dtype, a shape and row-major contiguous storage, owned (shared between copies of
// the handle) or a view into another tensor's storage. Copying a Tensor copies the handle, not
// the data (like torch.Tensor); use clone() for a deep copy.
//
// Allocation goes through the MemoryAccountant under the category given at creation; a view
// shares its base's storage and category. Storage is zero-initialised by zeros(), uninitialised
// by empty(). Not thread-safe for concurrent mutation of the same storage (kernels partition
// work themselves).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/memory.h"

namespace tessera {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3, 4]"

class Tensor {
 public:
  Tensor() = default;  // an empty handle: defined() is false

  static Tensor empty(const Shape& shape, DType dtype,
                      MemoryCategory category = MemoryCategory::kActivations);
  static Tensor zeros(const Shape& shape, DType dtype,
                      MemoryCategory category = MemoryCategory::kActivations);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return numel_ * dtype_size(dtype_); }
  MemoryCategory category() const;

  // Typed access; checks that T matches dtype().
  template <typename T>
  T* data() {
    TESSERA_CHECK_MSG(dtype_of<T>() == dtype_, std::string("tensor is ") + dtype_name(dtype_));
    return reinterpret_cast<T*>(raw());
  }
  template <typename T>
  const T* data() const {
    TESSERA_CHECK_MSG(dtype_of<T>() == dtype_, std::string("tensor is ") + dtype_name(dtype_));
    return reinterpret_cast<const T*>(raw());
  }
  void* raw();
  const void* raw() const;

  // A view of the same storage with another shape of the same numel.
  Tensor view(const Shape& shape) const;
  // Rows [begin, end) of dim 0, as a view (contiguous because storage is row-major).
  Tensor slice_rows(int64_t begin, int64_t end) const;

  Tensor clone(MemoryCategory category) const;
  // A new tensor holding this one converted to `dtype` (fp32/bf16/fp16 among each other).
  Tensor to(DType dtype, MemoryCategory category) const;
  // Copies `src` (same numel, any of fp32/bf16/fp16) into this tensor, converting.
  void copy_from(const Tensor& src);
  void zero_();

 private:
  struct Storage;
  std::shared_ptr<Storage> storage_;
  int64_t offset_bytes_ = 0;
  DType dtype_ = DType::kF32;
  Shape shape_;
  int64_t numel_ = 0;
};

}  // namespace tessera
