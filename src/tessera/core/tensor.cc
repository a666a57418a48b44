#include "tessera/core/tensor.h"

#include <cstring>
#include <sstream>

namespace tessera {

struct Tensor::Storage {
  void* ptr = nullptr;
  size_t bytes = 0;
  MemoryCategory category = MemoryCategory::kOther;
  Storage(size_t n, MemoryCategory c) : ptr(tracked_alloc(n, c)), bytes(n), category(c) {}
  ~Storage() { tracked_free(ptr, bytes, category); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    TESSERA_CHECK(d >= 0);
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

Tensor Tensor::empty(const Shape& shape, DType dtype, MemoryCategory category) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  // Zero-sized tensors still get a (1-byte) storage so that defined() is true.
  t.storage_ = std::make_shared<Storage>(std::max<size_t>(t.nbytes(), 1), category);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, MemoryCategory category) {
  Tensor t = empty(shape, dtype, category);
  t.zero_();
  return t;
}

MemoryCategory Tensor::category() const {
  TESSERA_CHECK(defined());
  return storage_->category;
}

void* Tensor::raw() {
  TESSERA_CHECK(defined());
  return static_cast<char*>(storage_->ptr) + offset_bytes_;
}

const void* Tensor::raw() const {
  TESSERA_CHECK(defined());
  return static_cast<const char*>(storage_->ptr) + offset_bytes_;
}

Tensor Tensor::view(const Shape& shape) const {
  TESSERA_CHECK_MSG(shape_numel(shape) == numel_, shape_str(shape) + " vs " + shape_str(shape_));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  TESSERA_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0]);
  Tensor t = *this;
  const int64_t row = shape_[0] == 0 ? 0 : numel_ / shape_[0];
  t.shape_[0] = end - begin;
  t.numel_ = row * (end - begin);
  t.offset_bytes_ += begin * row * static_cast<int64_t>(dtype_size(dtype_));
  return t;
}

Tensor Tensor::clone(MemoryCategory category) const {
  Tensor t = empty(shape_, dtype_, category);
  std::memcpy(t.raw(), raw(), nbytes());
  return t;
}

Tensor Tensor::to(DType dtype, MemoryCategory category) const {
  Tensor t = empty(shape_, dtype, category);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  TESSERA_CHECK_MSG(src.numel() == numel_, shape_str(src.shape()) + " into " + shape_str(shape_));
  if (src.dtype() == dtype_) {
    std::memcpy(raw(), src.raw(), nbytes());
    return;
  }
  // Go through fp32 for the float formats.
  if (dtype_ == DType::kF32 && src.dtype() == DType::kBF16) {
    convert(data<float>(), src.data<bf16>(), numel_);
  } else if (dtype_ == DType::kF32 && src.dtype() == DType::kF16) {
    convert(data<float>(), src.data<fp16>(), numel_);
  } else if (dtype_ == DType::kBF16 && src.dtype() == DType::kF32) {
    convert(data<bf16>(), src.data<float>(), numel_);
  } else if (dtype_ == DType::kF16 && src.dtype() == DType::kF32) {
    convert(data<fp16>(), src.data<float>(), numel_);
  } else {
    auto is_float = [](DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; };
    TESSERA_CHECK_MSG(is_float(dtype_) && is_float(src.dtype()),
                      std::string(dtype_name(src.dtype())) + " to " + dtype_name(dtype_));
    Tensor tmp = src.to(DType::kF32, MemoryCategory::kOther);
    copy_from(tmp);
  }
}

void Tensor::zero_() {
  if (numel_ > 0) std::memset(raw(), 0, nbytes());
}

}  // namespace tessera
