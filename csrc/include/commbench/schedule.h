// Algorithm schedules: which chunk of the buffer goes to which peer at which step, and which chunk
// gets reduced. Pure index arithmetic with no transport and no arithmetic on data, so the host (MPI)
// and device (NCCL) executors walk the very same schedule.
#pragma once

#include <cstddef>

namespace commbench {

// A contiguous range of elements [begin, begin + count).
struct Span {
  std::size_t begin;
  std::size_t count;
};

// Splits n elements into `parts` nearly equal ranges; the first n % parts ranges hold one extra
// element, so any n (0, 1, fewer than parts, not divisible) is covered exactly once.
inline Span split_part(std::size_t n, int parts, int index) {
  const std::size_t p = static_cast<std::size_t>(parts), i = static_cast<std::size_t>(index);
  const std::size_t base = n / p, extra = n % p;
  return Span{i * base + (i < extra ? i : extra), base + (i < extra ? 1 : 0)};
}

inline int wrap(int i, int p) { return ((i % p) + p) % p; }

// Ring all-reduce = reduce-scatter then all-gather over p chunks, 2(p-1) steps; the first p - 1
// steps alone are the ring reduce-scatter and the last p - 1 alone the ring all-gather. At every step
// each rank sends one chunk to its right neighbour and receives one from its left neighbour.
struct RingStep {
  int send_peer;
  int recv_peer;
  int send_chunk;
  int recv_chunk;
  bool reduce;  // true: the received chunk is combined into ours; false: it overwrites ours
};

struct RingSchedule {
  int rank;
  int size;

  int steps() const { return size > 1 ? 2 * (size - 1) : 0; }
  // Steps [0, reduce_scatter_steps()) reduce-scatter, the rest all-gather.
  int reduce_scatter_steps() const { return size > 1 ? size - 1 : 0; }
  Span chunk(std::size_t n, int c) const { return split_part(n, size, c); }

  RingStep step(int s) const {
    const int right = wrap(rank + 1, size), left = wrap(rank - 1, size);
    if (s < size - 1) {
      // Reduce-scatter: after step s, chunk (rank - s - 2) holds the partial result of s + 2 ranks;
      // after p - 1 steps, rank r owns the complete chunk r, as a reduce-scatter must leave it.
      return RingStep{right, left, wrap(rank - s - 1, size), wrap(rank - s - 2, size), true};
    }
    // All-gather: each rank starts from its own chunk r and passes the completed chunks around.
    const int g = s - (size - 1);
    return RingStep{right, left, wrap(rank - g, size), wrap(rank - g - 1, size), false};
  }
};

// Tree of `arity` children per rank over the ranks renumbered from `root` (virtual rank v = rank -
// root mod p; children of v are arity*v+1 ... arity*v+arity): binary (arity 2) or a chain (arity 1:
// each rank forwards to the next, p - 1 hops but one child to feed). The all-reduce reduces towards
// the root and then broadcasts back, both pipelined in chunks so that interior ranks forward chunk k
// while their children already send chunk k + 1; each half alone is the tree reduce or the tree
// broadcast from `root`.
struct TreeSchedule {
  int rank;
  int size;
  std::size_t chunk_elems;  // pipeline granularity, at least 1
  int root = 0;
  int arity = 2;

  // Pipeline chunk (elements) for a message of n elements of elem_bytes: chunk_bytes in whole
  // elements, at least one, and no larger than the message (more would only waste scratch memory).
  static std::size_t chunk_for(std::size_t chunk_bytes, std::size_t elem_bytes, std::size_t n) {
    const std::size_t c = chunk_bytes / elem_bytes;
    return c < 1 ? 1 : (c < n ? c : (n > 0 ? n : 1));
  }

  int virtual_rank() const { return wrap(rank - root, size); }
  int parent() const {
    const int v = virtual_rank();
    return v == 0 ? -1 : wrap((v - 1) / arity + root, size);
  }
  int num_children() const {
    int c = 0;
    for (int k = 1; k <= arity; ++k) c += (arity * virtual_rank() + k < size) ? 1 : 0;
    return c;
  }
  int child(int k) const { return wrap(arity * virtual_rank() + 1 + k + root, size); }
  std::size_t num_chunks(std::size_t n) const {
    return n == 0 ? 0 : (n + chunk_elems - 1) / chunk_elems;
  }
  Span chunk(std::size_t n, std::size_t k) const {
    const std::size_t b = k * chunk_elems;
    return Span{b, (n - b) < chunk_elems ? (n - b) : chunk_elems};
  }
};

// The binomial tree of a rooted collective of per-rank blocks (gather, scatter), over relative ranks
// v = rank - root (mod size): v's parent is v less its lowest set bit, its children v + m for each
// power of two m below that bit (every m for the root) that names a rank, and its subtree the ranks
// [v, v + span(v)): contiguous in relative order, so a subtree's blocks travel as one message.
// A rank is as many messages from the root as its relative rank has bits set, floor(log2 size) at
// most; the root's link carries every other rank's block once.
struct BinomialSchedule {
  int rank;
  int size;
  int root;

  int rel() const { return wrap(rank - root, size); }
  int abs(int v) const { return wrap(v + root, size); }
  static int low_bit(int v) { return v & -v; }
  int span_of(int v) const { return v == 0 ? size : (low_bit(v) < size - v ? low_bit(v) : size - v); }
  int span() const { return span_of(rel()); }
  // The parent's rank; -1 at the root.
  int parent() const {
    const int v = rel();
    return v == 0 ? -1 : abs(v - low_bit(v));
  }
  // Children, nearest first: child i is relative rank rel() + 2^i, and its subtree's blocks start at
  // block 2^i of this rank's subtree.
  int num_children() const {
    const int v = rel();
    int n = 0;
    for (int m = 1; m < span_of(v); m <<= 1) ++n;
    return n;
  }
};

}  // namespace commbench
