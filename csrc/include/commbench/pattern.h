// Test data that reduces exactly in any order and in every supported dtype: small integers for
// sum, values in {-2, -1, 1, 2} with at most one factor 2 per element for prod, and integers below
// 256 in magnitude (exact even in bfloat16) for max and min. Values repeat with a short period in the
// element index, so checking a buffer costs one table lookup per element.
#pragma once

#include <cstddef>

#include "commbench/reduce.h"

namespace commbench {

// Half-width of the sum pattern: the full sum over p ranks stays within +-128, exact in bfloat16.
COMMBENCH_HD int sum_halfwidth(int p) {
  const int k = 128 / (p > 0 ? p : 1);
  return k < 1 ? 1 : (k > 8 ? 8 : k);
}

COMMBENCH_HD std::size_t gcd_size(std::size_t a, std::size_t b) {
  while (b != 0) {
    const std::size_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

// Period of the pattern in the element index.
COMMBENCH_HD std::size_t pattern_period(RedOp op, int p) {
  switch (op) {
    case RedOp::Sum: return static_cast<std::size_t>(2 * sum_halfwidth(p) + 1);
    case RedOp::Prod: return 5 * static_cast<std::size_t>(p) / gcd_size(5, static_cast<std::size_t>(p));
    default: return 251;
  }
}

// The value rank r of p contributes at element index i.
COMMBENCH_HD int pattern_value(RedOp op, std::size_t i, int r, int p) {
  switch (op) {
    case RedOp::Sum: {
      const int k = sum_halfwidth(p);
      return static_cast<int>((i * 7 + static_cast<std::size_t>(r) * 13) % (2 * k + 1)) - k;
    }
    case RedOp::Prod: {
      const int two = ((i + static_cast<std::size_t>(r)) % static_cast<std::size_t>(p)) == 0 ? 2 : 1;
      return ((i * 3 + static_cast<std::size_t>(r)) % 5) == 0 ? -two : two;
    }
    default:
      return static_cast<int>((i * 7 + static_cast<std::size_t>(r) * 13) % 251) - 125;
  }
}

// The exact reduction over all p ranks at element index i.
COMMBENCH_HD double pattern_expected(RedOp op, std::size_t i, int p) {
  double acc = pattern_value(op, i, 0, p);
  for (int r = 1; r < p; ++r) {
    const double v = pattern_value(op, i, r, p);
    switch (op) {
      case RedOp::Sum: acc += v; break;
      case RedOp::Prod: acc *= v; break;
      case RedOp::Max: acc = acc < v ? v : acc; break;
      case RedOp::Min: acc = v < acc ? v : acc; break;
    }
  }
  return acc;
}

// count_wrong's sources: a rank's own values (its number), the exact reduction over all ranks (-1,
// collectives/base.py's REDUCED), or the stale value a receive buffer is given before a call
// (kUntouched, base.py's UNTOUCHED: a buffer the call must leave alone, as a reduce leaves the other
// ranks' receive buffers; run/buffers.py's _STALE).
constexpr int kUntouched = -2;
constexpr double kStaleValue = 77;

// What element index i of a buffer must hold, from `source` (above).
COMMBENCH_HD double expected_at(RedOp op, std::size_t i, int source, int p) {
  if (source == kUntouched) return kStaleValue;
  if (source < 0) return pattern_expected(op, i, p);
  return pattern_value(op, i, source, p);
}

// The byte a copy check writes at offset i. `seed` tells a copy's source from the stale content
// its destination is given first, so a copy that moved nothing shows as wrong; 251 is prime, so
// the pattern does not repeat with any power-of-two stride.
COMMBENCH_HD unsigned char byte_pattern(std::size_t i, unsigned seed) {
  return static_cast<unsigned char>((i * 7 + 3 + seed * 101) % 251);
}

}  // namespace commbench
