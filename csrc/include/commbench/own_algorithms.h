// Our own algorithm for each collective, as one call over any transport (collectives.h): the host
// binds it to MPI point-to-point and memcpy, the device to NCCL point-to-point and asynchronous device
// copies. Which of our algorithms runs which collective is decided here once, for both extensions;
// the library calls (MPI_*, nccl*) live beside each transport. Collectives go by their registry names
// (commbench/collectives/ in Python), so one with library calls only needs nothing here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "commbench/collectives.h"

namespace commbench {

// One call's buffers in nccl-tests' layout: `send` holds send_count elements and `recv` recv_count.
// In place they overlap as nccl-tests places them: all-gather's send is recv + r*c, reduce-scatter's
// recv is send + r*c, the others use one buffer.
template <typename T>
struct CallBuffers {
  const T* send;
  T* recv;
  std::size_t send_count, recv_count;
  bool in_place;
  int rank, size, root;
};

enum class Coll { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll };
enum class Algo { Ring, Tree, Chain, Pairwise };

// One of our algorithms for one collective.
struct Own {
  Coll coll;
  Algo algo;
};

// Our algorithm named `impl` for the collective named `name`; throws when we have none.
inline Own own_algo(const std::string& name, const std::string& impl) {
  if (impl == "ring") {
    if (name == "allreduce") return {Coll::AllReduce, Algo::Ring};
    if (name == "allgather") return {Coll::AllGather, Algo::Ring};
    if (name == "reducescatter") return {Coll::ReduceScatter, Algo::Ring};
  }
  if (impl == "tree") {
    if (name == "allreduce") return {Coll::AllReduce, Algo::Tree};
    if (name == "broadcast") return {Coll::Broadcast, Algo::Tree};
    if (name == "reduce") return {Coll::Reduce, Algo::Tree};
  }
  if (impl == "chain") {
    if (name == "broadcast") return {Coll::Broadcast, Algo::Chain};
    if (name == "reduce") return {Coll::Reduce, Algo::Chain};
  }
  if (impl == "pairwise" && name == "alltoall") return {Coll::AllToAll, Algo::Pairwise};
  throw std::invalid_argument("no algorithm '" + impl + "' of ours for " + name);
}

// The tree and the chain send in pipeline chunks (--chunk).
inline bool pipelined(Own own) { return own.algo == Algo::Tree || own.algo == Algo::Chain; }

// Scratch elements own_call needs. `chunk` is the tree's pipeline chunk in elements.
template <typename T>
std::size_t own_scratch_elems(Own own, const CallBuffers<T>& b, std::size_t chunk) {
  if (pipelined(own)) return tree_scratch_elems<T>(chunk);
  if (own.algo != Algo::Ring) return 0;
  if (own.coll == Coll::ReduceScatter)  // out of place, the whole input is reduced in a copy
    return (b.in_place ? 0 : b.send_count) + ring_scratch_elems<T>(b.send_count, b.size);
  return ring_scratch_elems<T>(b.recv_count, b.size);
}

// The body of one timed call of our algorithm: copies an out-of-place call needs, then the schedule.
// `copy(dst, src, elems)` copies within this rank's memory.
template <typename T, typename Transport, typename Reducer, typename Copy>
std::function<void()> own_call(Own own, Transport& tr, Reducer& reduce, Copy& copy, const CallBuffers<T>& b, T* scratch,
                               std::size_t chunk) {
  const Algo algo = own.algo;
  const RingSchedule ring{b.rank, b.size};
  const TreeSchedule tree{b.rank, b.size, chunk, b.root, algo == Algo::Chain ? 1 : 2};
  T* out = b.recv;
  const T* in = b.send;
  switch (own.coll) {
    case Coll::AllReduce:
      return [=, &tr, &reduce, &copy] {
        if (!b.in_place) copy(out, in, b.recv_count);
        if (algo == Algo::Ring)
          ring_allreduce(tr, reduce, ring, out, scratch, b.recv_count);
        else
          tree_allreduce(tr, reduce, tree, out, scratch, b.recv_count);
      };
    case Coll::AllGather:
      return [=, &tr, &reduce, &copy] {
        if (!b.in_place) copy(out + static_cast<std::size_t>(b.rank) * b.send_count, in, b.send_count);
        ring_allgather(tr, reduce, ring, out, b.recv_count);
      };
    case Coll::ReduceScatter: {
      // In place the input is reduced where it lies and chunk r is already the output.
      T* work = b.in_place ? const_cast<T*>(in) : scratch;
      T* tmp = b.in_place ? scratch : scratch + b.send_count;
      return [=, &tr, &reduce, &copy] {
        if (!b.in_place) copy(work, in, b.send_count);
        ring_reduce_scatter(tr, reduce, ring, work, tmp, b.send_count);
        if (!b.in_place) copy(out, work + static_cast<std::size_t>(b.rank) * b.recv_count, b.recv_count);
      };
    }
    case Coll::Broadcast:
      return [=, &tr, &copy] {
        if (!b.in_place && b.rank == b.root) copy(out, in, b.recv_count);
        tree_broadcast(tr, tree, out, b.recv_count);
      };
    case Coll::Reduce:
      return [=, &tr, &reduce, &copy] {
        if (!b.in_place) copy(out, in, b.recv_count);
        tree_reduce(tr, reduce, tree, out, scratch, b.recv_count);
      };
    case Coll::AllToAll:
      return [=, &tr] { pairwise_alltoall(tr, b.rank, b.size, in, out, b.send_count / static_cast<std::size_t>(b.size)); };
  }
  throw std::invalid_argument("no algorithm of ours for this collective");
}

// The group of calls that need none.
struct NoGroup {
  void end() {}
};
inline NoGroup no_group() { return {}; }

// `agg` calls of `call` as one timed operation (nccl-tests' -m): `group` opens whatever makes them
// progress together (a NCCL group around library calls; nothing for MPI or for our algorithms,
// whose reductions must run between their own groups).
template <typename Group>
std::function<void()> aggregated(std::function<void()> call, int64_t agg, Group group) {
  if (agg <= 1) return call;
  return [call, agg, group] {
    auto g = group();
    for (int64_t k = 0; k < agg; ++k) call();
    g.end();
  };
}

}  // namespace commbench
