// The reduction of one chunk: one templated functor per operation, usable from host code and from
// CUDA kernels alike, so the host tests exercise exactly the arithmetic the device path runs.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define COMMBENCH_HD __host__ __device__ __forceinline__
#else
#define COMMBENCH_HD inline
#endif

namespace commbench {

enum class RedOp : int { Sum = 0, Prod = 1, Max = 2, Min = 3 };

struct OpSum {
  template <typename T> COMMBENCH_HD T operator()(T a, T b) const { return static_cast<T>(a + b); }
};
struct OpProd {
  template <typename T> COMMBENCH_HD T operator()(T a, T b) const { return static_cast<T>(a * b); }
};
// Written with a comparison rather than std::max so that it compiles for device code and for the
// 16-bit float types, whose comparison operators go through float.
struct OpMax {
  template <typename T> COMMBENCH_HD T operator()(T a, T b) const { return a < b ? b : a; }
};
struct OpMin {
  template <typename T> COMMBENCH_HD T operator()(T a, T b) const { return b < a ? b : a; }
};

// dst[i] = op(dst[i], src[i]) over n elements. __restrict__ and the plain index loop are what let
// the compiler vectorise it (checked with -fopt-info-vec in the build).
template <typename T, typename Op>
inline void reduce_into(T* __restrict__ dst, const T* __restrict__ src, std::size_t n, Op op) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = op(dst[i], src[i]);
}

// Calls f(OpX{}) for the runtime operation; the single place that maps RedOp to a functor type.
template <typename F>
inline auto dispatch_op(RedOp op, F&& f) {
  switch (op) {
    case RedOp::Prod: return f(OpProd{});
    case RedOp::Max: return f(OpMax{});
    case RedOp::Min: return f(OpMin{});
    case RedOp::Sum:
    default: return f(OpSum{});
  }
}

}  // namespace commbench
