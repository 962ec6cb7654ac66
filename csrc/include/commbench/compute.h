// The computation that `overlap` runs beside a collective on a CPU rank (its kind `loop`): a fixed
// amount of work, so that its time alone and beside the collective can be compared (OSU's compute loop
// runs until a time has passed instead, which hides its own slowdown). A sweep adds y to x over two
// vectors that stay in the core's caches, as OSU's small dense product does; the values are small
// integers in doubles, so the result after n sweeps is known exactly and checked as a collective's is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace commbench {

class HostCompute {
 public:
  // 2 x 16 KiB: within any core's L1 or L2, so that a sweep costs the core's time, not memory's.
  static constexpr std::size_t kElems = 2048;

  HostCompute() : x_(kElems), y_(kElems) {
    for (std::size_t i = 0; i < kElems; ++i) y_[i] = static_cast<double>(i % 7 + 1);
    reset();
  }

  void reset() {
    for (std::size_t i = 0; i < kElems; ++i) x_[i] = static_cast<double>(i % 1024);
  }

  void sweeps(int64_t n) {
    double* x = x_.data();
    const double* y = y_.data();
    for (int64_t s = 0; s < n; ++s) {
      for (std::size_t i = 0; i < kElems; ++i) x[i] += y[i];
      // Each sweep is done as written: without this the compiler may fold n sweeps into one.
      asm volatile("" : : "r"(x) : "memory");
    }
  }

  // Elements that differ from what `n` sweeps since the last reset leave (exact below 2^53).
  int64_t wrong(int64_t n) const {
    int64_t bad = 0;
    for (std::size_t i = 0; i < kElems; ++i)
      bad += x_[i] != static_cast<double>(i % 1024) + static_cast<double>(n) * y_[i];
    return bad;
  }

 private:
  std::vector<double> x_, y_;
};

}  // namespace commbench
