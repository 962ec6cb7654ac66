// A buffer as the timed loops see it: where it starts, how many elements, of which dtype, on which
// device. Both extensions take their buffers as this (buffer_caster.h makes one from a NumPy array or
// a torch tensor), so the host extension needs no tensor library and its ranks never load torch.
#pragma once

#include <c10/util/BFloat16.h>  // header-only: the 16-bit float types, the same on host and device
#include <c10/util/Half.h>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <stdexcept>
#include <string>

#include "commbench/reduce.h"

namespace commbench {

// The dtypes a sweep takes, under the names the command line uses (collectives/dtypes.py), and bytes
// (point-to-point messages), which nothing reduces or checks element by element.
enum class DType : int { Float32, Float64, Float16, BFloat16, Int32, Int64, UInt8 };
inline constexpr const char* kDTypeNames[] = {"float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"};
inline constexpr std::size_t kItemSizes[] = {4, 8, 2, 2, 4, 8, 1};

inline DType dtype_named(const std::string& name) {
  for (std::size_t i = 0; i < std::size(kDTypeNames); ++i)
    if (name == kDTypeNames[i]) return static_cast<DType>(i);
  throw std::invalid_argument("unsupported dtype " + name);
}

constexpr int kHost = -1;

struct Buffer {
  void* data = nullptr;
  std::size_t count = 0;
  DType dtype = DType::Float32;
  int device = kHost;  // a CUDA ordinal, or kHost

  bool on_host() const { return device == kHost; }
};

template <typename T>
struct Tag {
  using type = T;
};

// The one place that maps a sweep's dtype to its element type.
template <typename F>
auto dispatch_dtype(DType dt, F&& f) {
  switch (dt) {
    case DType::Float32: return f(Tag<float>{});
    case DType::Float64: return f(Tag<double>{});
    case DType::Float16: return f(Tag<c10::Half>{});
    case DType::BFloat16: return f(Tag<c10::BFloat16>{});
    case DType::Int32: return f(Tag<int32_t>{});
    case DType::Int64: return f(Tag<int64_t>{});
    case DType::UInt8: break;
  }
  throw std::invalid_argument(std::string("no collective or check takes dtype ") + kDTypeNames[static_cast<int>(dt)]);
}

inline std::size_t nbytes(const Buffer& b) { return b.count * kItemSizes[static_cast<int>(b.dtype)]; }

// f(Tag<T>{}, OpX{}) for the runtime dtype and reduction op.
template <typename F>
auto dispatch_dtype_op(DType dt, RedOp op, F&& f) {
  return dispatch_dtype(dt, [&](auto tag) { return dispatch_op(op, [&](auto functor) { return f(tag, functor); }); });
}

inline RedOp redop_from(int64_t op) {
  if (op < 0 || op > 3) throw std::invalid_argument("unknown reduction op code " + std::to_string(op));
  return static_cast<RedOp>(op);
}

inline bool overlap(const Buffer& a, const Buffer& b) {
  const char* a0 = static_cast<const char*>(a.data);
  const char* b0 = static_cast<const char*>(b.data);
  return a0 < b0 + nbytes(b) && b0 < a0 + nbytes(a);
}

}  // namespace commbench
