// Tensor dtype and reduction-op dispatch shared by the host and CUDA extensions.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <stdexcept>
#include <string>

#include "commbench/reduce.h"

namespace commbench {

template <typename T>
struct Tag {
  using type = T;
};

// The one place that maps the supported tensor dtypes to element types.
template <typename F>
auto dispatch_dtype(at::ScalarType st, F&& f) {
  switch (st) {
    case at::kFloat: return f(Tag<float>{});
    case at::kDouble: return f(Tag<double>{});
    case at::kHalf: return f(Tag<c10::Half>{});
    case at::kBFloat16: return f(Tag<c10::BFloat16>{});
    case at::kInt: return f(Tag<int32_t>{});
    case at::kLong: return f(Tag<int64_t>{});
    default: throw std::invalid_argument(std::string("unsupported dtype ") + c10::toString(st));
  }
}

// f(Tag<T>{}, OpX{}) for the runtime dtype and reduction op.
template <typename F>
auto dispatch_dtype_op(at::ScalarType st, RedOp op, F&& f) {
  return dispatch_dtype(st, [&](auto tag) { return dispatch_op(op, [&](auto functor) { return f(tag, functor); }); });
}

inline RedOp redop_from(int64_t op) {
  if (op < 0 || op > 3) throw std::invalid_argument("unknown reduction op code " + std::to_string(op));
  return static_cast<RedOp>(op);
}

}  // namespace commbench
