#include "tessera/model/parallel_linear.h"

#include "tessera/kernels/linear.h"

namespace tessera::model {

Tensor ColumnParallelLinear::forward(const Tensor& x, int64_t batch, Tensor* input) const {
  const Tensor gathered = tp_->column_input_forward(x, batch);
  *input = kept_ == KeptInput::kGathered ? gathered : x;
  return local_.forward(gathered);
}

Tensor ColumnParallelLinear::backward(const Tensor& dy, const Tensor& input, int64_t batch) const {
  Tensor dx;
  {
    // With kLocalRows the input gathered again lives only for the products: freed before the
    // reduction's slice is allocated (model/activation_memory.h counts the backward's peak this
    // way). With kGathered the caller's kept copy is used and stays the caller's.
    const Tensor gathered =
        kept_ == KeptInput::kGathered ? input : tp_->column_input_forward(input, batch);
    dx = local_.backward(dy, gathered);
  }
  return tp_->column_input_backward(std::move(dx), batch);
}

Tensor RowParallelLinear::forward(const Tensor& x, int64_t batch) const {
  Tensor y = tp_->row_output_forward(local_.forward(x), batch);
  if (bias_.defined()) {
    visit_float(y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::bias_forward(y.data<T>(), bias_.data<T>(), y.dim(0), y.dim(1));
    });
  }
  return y;
}

Tensor RowParallelLinear::backward(const Tensor& dy, const Tensor& x, int64_t batch) const {
  if (bias_.defined()) {
    // Under SP this covers this rank's slice of the tokens only; the trainer sums the replicated
    // parameters' gradients over TP (distributed/tensor_parallel_grads.h).
    visit_float(dy.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::bias_backward(dbias_.data<float>(), dy.data<T>(), dy.dim(0), dy.dim(1));
    });
  }
  return local_.backward(tp_->row_output_backward(dy, batch), x);
}

}  // namespace tessera::model
