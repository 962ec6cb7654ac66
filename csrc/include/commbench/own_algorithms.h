// Our own algorithm for each collective, as one call over any transport (collectives.h): the host
// binds it to MPI point-to-point and memcpy, the device to NCCL point-to-point and asynchronous device
// copies. Which of our algorithms runs which collective is decided here once, for both extensions;
// the libraries' own calls are in library_calls.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "commbench/collectives.h"
#include "commbench/library_calls.h"

namespace commbench {

// The ways to run a collective, as Python passes them (collective_times.h exports the enum from each
// extension): Library is the transport's own call (library_calls.h), the others are ours.
// kAlgorithmNames gives each value, in declaration order, its name in Python's registry
// (commbench/collectives/impls.py): the only place an algorithm's name is tied to its value.
enum class Algorithm { Library, Ring, Tree, Chain, Pairwise, Binomial };
inline constexpr const char* kAlgorithmNames[] = {"library", "ring", "tree", "chain", "pairwise", "binomial"};
inline const char* name_of(Algorithm a) { return kAlgorithmNames[static_cast<int>(a)]; }

// One of our algorithms for one collective.
struct Own {
  Collective coll;
  Algorithm algo;
};

// `algo` for `coll`, checked to be one we have.
inline Own own_algo(Collective coll, Algorithm algo) {
  using C = Collective;
  bool ours = false;
  switch (algo) {
    case Algorithm::Ring: ours = coll == C::AllReduce || coll == C::AllGather || coll == C::ReduceScatter; break;
    case Algorithm::Tree: ours = coll == C::AllReduce || coll == C::Broadcast || coll == C::Reduce; break;
    case Algorithm::Chain: ours = coll == C::Broadcast || coll == C::Reduce; break;
    case Algorithm::Pairwise: ours = coll == C::AllToAll; break;
    case Algorithm::Binomial: ours = coll == C::Gather || coll == C::Scatter; break;
    case Algorithm::Library: break;
  }
  if (!ours) throw std::invalid_argument(std::string("no algorithm '") + name_of(algo) + "' of ours for " + name_of(coll));
  return {coll, algo};
}

// The tree and the chain send in pipeline chunks (--chunk).
inline bool pipelined(Own own) { return own.algo == Algorithm::Tree || own.algo == Algorithm::Chain; }

// The tree (fanout 2) or chain (fanout 1) of a pipelined algorithm's call. `chunk` in elements.
template <typename T>
TreeSchedule tree_of(Own own, const CallBuffers<T>& b, std::size_t chunk) {
  return TreeSchedule{b.rank, b.size, chunk, b.root, own.algo == Algorithm::Chain ? 1 : 2};
}

// A reduce writes the root's output alone (MPI's and NCCL's leave the other ranks' receive buffers as
// they were, and a rank's input is const): a rank that is neither the root nor a leaf sums its
// children's chunks into a copy of its input in scratch. A leaf sends its input as it is.
template <typename T>
bool reduces_in_scratch(Own own, const CallBuffers<T>& b, std::size_t chunk) {
  return own.coll == Collective::Reduce && b.rank != b.root && tree_of(own, b, chunk).num_children() > 0;
}

// Scratch elements own_call needs. `chunk` is the tree's pipeline chunk in elements.
template <typename T>
std::size_t own_scratch_elems(Own own, const CallBuffers<T>& b, std::size_t chunk) {
  if (pipelined(own)) return (reduces_in_scratch(own, b, chunk) ? b.recv_count : 0) + tree_scratch_elems<T>(chunk);
  if (own.algo == Algorithm::Binomial) return b.size > 1 ? b.send_count > b.recv_count ? b.send_count : b.recv_count : 0;
  if (own.algo != Algorithm::Ring) return 0;
  if (own.coll == Collective::ReduceScatter)  // out of place, the whole input is reduced in a copy
    return (b.in_place ? 0 : b.send_count) + ring_scratch_elems<T>(b.send_count, b.size);
  return ring_scratch_elems<T>(b.recv_count, b.size);
}

// The body of one timed call of our algorithm: copies an out-of-place call needs, then the schedule.
// `copy(dst, src, elems)` copies within this rank's memory.
template <typename T, typename Transport, typename Reducer, typename Copy>
std::function<void()> own_call(Own own, Transport& tr, Reducer& reduce, Copy& copy, const CallBuffers<T>& b, T* scratch,
                               std::size_t chunk) {
  const Algorithm algo = own.algo;
  const RingSchedule ring{b.rank, b.size};
  const TreeSchedule tree = tree_of(own, b, chunk);
  T* out = b.recv;
  const T* in = b.send;
  switch (own.coll) {
    case Collective::AllReduce:
      return [=, &tr, &reduce, &copy] {
        if (!b.in_place) copy(out, in, b.recv_count);
        if (algo == Algorithm::Ring)
          ring_allreduce(tr, reduce, ring, out, scratch, b.recv_count);
        else
          tree_allreduce(tr, reduce, tree, out, scratch, b.recv_count);
      };
    case Collective::AllGather:
      return [=, &tr, &reduce, &copy] {
        if (!b.in_place) copy(out + static_cast<std::size_t>(b.rank) * b.send_count, in, b.send_count);
        ring_allgather(tr, reduce, ring, out, b.recv_count);
      };
    case Collective::ReduceScatter: {
      // In place the input is reduced where it lies and chunk r is already the output.
      T* work = b.in_place ? const_cast<T*>(in) : scratch;
      T* tmp = b.in_place ? scratch : scratch + b.send_count;
      return [=, &tr, &reduce, &copy] {
        if (!b.in_place) copy(work, in, b.send_count);
        ring_reduce_scatter(tr, reduce, ring, work, tmp, b.send_count);
        if (!b.in_place) copy(out, work + static_cast<std::size_t>(b.rank) * b.recv_count, b.recv_count);
      };
    }
    case Collective::Broadcast:
      return [=, &tr, &copy] {
        if (!b.in_place && b.rank == b.root) copy(out, in, b.recv_count);
        tree_broadcast(tr, tree, out, b.recv_count);
      };
    case Collective::Reduce: {
      const bool root = b.rank == b.root, in_scratch = reduces_in_scratch(own, b, chunk);
      // The root reduces into its output; the others never write their output or their input.
      T* work = root ? out : in_scratch ? scratch : const_cast<T*>(in);
      T* tmp = in_scratch ? scratch + b.recv_count : scratch;
      return [=, &tr, &reduce, &copy] {
        if (work != in) copy(work, in, b.recv_count);
        tree_reduce(tr, reduce, tree, work, tmp, b.recv_count);
      };
    }
    case Collective::AllToAll:
      return [=, &tr] { pairwise_alltoall(tr, b.rank, b.size, in, out, b.send_count / static_cast<std::size_t>(b.size)); };
    case Collective::Gather: {
      // This rank's subtree gathers in relative order (binomial_gather): in the root's output where
      // that is its order (root 0), else in scratch, rotated into place after; a leaf sends its input.
      const BinomialSchedule s{b.rank, b.size, b.root};
      const std::size_t c = b.send_count, root = static_cast<std::size_t>(b.root);
      const std::size_t after = static_cast<std::size_t>(b.size - b.root - 1);
      const bool at_root = b.rank == b.root;
      T* work = at_root && root == 0 ? out : at_root || s.span() > 1 ? scratch : const_cast<T*>(in);
      return [=, &tr, &copy] {
        if (c == 0 || b.size == 1) {
          if (c && !b.in_place) copy(out, in, c);
          return;
        }
        if (at_root && !b.in_place) copy(out + root * c, in, c);
        if (!at_root && work != in) copy(work, in, c);
        binomial_gather(tr, s, work, c);
        if (at_root && work != out) {  // relative block u is rank root + u's
          copy(out + (root + 1) * c, work + c, after * c);
          copy(out, work + (1 + after) * c, root * c);
        }
      };
    }
    case Collective::Scatter: {
      // The mirror image: the root's blocks in relative order (its input where that is its order,
      // else rotated into scratch first), each rank's subtree received in scratch, a leaf's block in
      // its output.
      const BinomialSchedule s{b.rank, b.size, b.root};
      const std::size_t c = b.recv_count, root = static_cast<std::size_t>(b.root);
      const std::size_t after = static_cast<std::size_t>(b.size - b.root - 1);
      const bool at_root = b.rank == b.root;
      T* work = at_root ? (root == 0 ? const_cast<T*>(in) : scratch) : s.span() > 1 ? scratch : out;
      return [=, &tr, &copy] {
        if (c == 0 || b.size == 1) {
          if (c && !b.in_place) copy(out, in, c);
          return;
        }
        if (at_root && work != in) {
          copy(work + c, in + (root + 1) * c, after * c);
          copy(work + (1 + after) * c, in, root * c);
        }
        binomial_scatter(tr, s, work, c);
        if (at_root && !b.in_place) copy(out, in + root * c, c);
        if (!at_root && work != out) copy(out, work, c);
      };
    }
    case Collective::SendRecv: break;
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
