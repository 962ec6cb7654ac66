// Executors that walk a schedule (schedule.h) over any transport and any reducer. The host binds
// them to MPI point-to-point and the loop in reduce.h; the device path binds the same executors to
// NCCL point-to-point and a kernel that calls the same functor.
//
// A Transport provides:
//   using Request = ...;
//   Group group();  // a guard with end(): the sends and receives posted between group() and
//                   // end() progress together (one NCCL group; nothing for MPI, whose requests
//                   // progress independently anyway)
//   void sendrecv(const void* s, size_t sbytes, int dst, void* r, size_t rbytes, int src);
//   Request isend(const void* p, size_t bytes, int peer);
//   Request irecv(void* p, size_t bytes, int peer);
//   void wait(Request&);  void wait_all(std::vector<Request>&);
//   static constexpr bool kStreamOrdered;  // true when calls run in the order they are posted
// A Reducer provides: void operator()(T* dst, const T* src, size_t count)  // dst = op(dst, src)
//
// On a stream-ordered transport (NCCL) every call is queued on one stream and runs in that order, so
// whatever must overlap has to be posted in one group: the executors are written as a sequence of
// steps, each one group, with the reductions between them. A request-based transport (MPI) instead
// gets the next receive posted before the current reduction, so data arrives while the host reduces.
#pragma once

#include <vector>

#include "commbench/alignment.h"
#include "commbench/schedule.h"

namespace commbench {

// Scratch elements ring_allreduce needs for n elements over p ranks: the largest chunk, plus room to
// place it with the destination chunk's misalignment.
template <typename T>
std::size_t ring_scratch_elems(std::size_t n, int p) {
  return n / static_cast<std::size_t>(p) + 1 + align_slack<T>();
}

// Ring steps [first, last) over buf[0, n) in place; tmp holds ring_scratch_elems<T>(n, p) elements
// when a reduce-scatter step is among them.
template <typename T, typename Transport, typename Reducer>
void ring_steps(Transport& tr, Reducer& reduce, const RingSchedule& s, T* buf, T* tmp, std::size_t n, int first,
                int last) {
  for (int st = first; st < last; ++st) {
    const RingStep step = s.step(st);
    const Span out = s.chunk(n, step.send_chunk), in = s.chunk(n, step.recv_chunk);
    T* landing = step.reduce ? align_like(tmp, buf + in.begin) : buf + in.begin;
    tr.sendrecv(buf + out.begin, out.count * sizeof(T), step.send_peer, landing,
                in.count * sizeof(T), step.recv_peer);
    if (step.reduce) reduce(buf + in.begin, landing, in.count);
  }
}

// In-place ring all-reduce of buf[0, n).
template <typename T, typename Transport, typename Reducer>
void ring_allreduce(Transport& tr, Reducer& reduce, const RingSchedule& s, T* buf, T* tmp, std::size_t n) {
  ring_steps(tr, reduce, s, buf, tmp, n, 0, s.steps());
}

// In-place ring reduce-scatter of buf[0, n): afterwards chunk r (split_part(n, p, r)) of rank r holds
// the reduction over all ranks.
template <typename T, typename Transport, typename Reducer>
void ring_reduce_scatter(Transport& tr, Reducer& reduce, const RingSchedule& s, T* buf, T* tmp, std::size_t n) {
  ring_steps(tr, reduce, s, buf, tmp, n, 0, s.reduce_scatter_steps());
}

// In-place ring all-gather of buf[0, n), rank r contributing chunk r.
template <typename T, typename Transport, typename Reducer>
void ring_allgather(Transport& tr, Reducer& reduce, const RingSchedule& s, T* buf, std::size_t n) {
  ring_steps(tr, reduce, s, buf, static_cast<T*>(nullptr), n, s.reduce_scatter_steps(), s.steps());
}

// Scratch elements tree_allreduce needs: two pipeline slots for each of up to two children, each
// with room for alignment.
template <typename T>
std::size_t tree_scratch_elems(std::size_t chunk_elems) {
  return 4 * (chunk_elems + align_slack<T>());
}

// Pipelined tree reduce of buf[0, n) in place towards s.root (whose buf ends with the reduction
// over all ranks; the other ranks' buf with partial results); tmp holds tree_scratch_elems<T>(chunk).
// Step k = 0..chunks receives chunk k from the children while chunk k - 1, already reduced, goes to
// the parent; then chunk k is reduced. A rank at depth h takes step k together with its parent's step
// k - 1 and its children's step k + 1, so every group finds its peers' matching groups and the
// pipeline takes chunks + depth - 1 steps.
template <typename T, typename Transport, typename Reducer>
void tree_reduce(Transport& tr, Reducer& reduce, const TreeSchedule& s, T* buf, T* tmp, std::size_t n) {
  using Request = typename Transport::Request;
  constexpr bool early = !Transport::kStreamOrdered;  // post receive k + 1 before finishing chunk k
  const std::size_t chunks = s.num_chunks(n);
  const int kids = s.num_children(), parent = s.parent();
  if (s.size == 1 || chunks == 0) return;

  const std::size_t slot_elems = s.chunk_elems + align_slack<T>();
  auto at = [&](std::size_t k) { return buf + s.chunk(n, k).begin; };
  auto bytes = [&](std::size_t k) { return s.chunk(n, k).count * sizeof(T); };
  // Chunk k from child c lands in slot k % 2: the slot of chunk k - 2, reduced two steps earlier
  // (k - 1 when receives are posted early).
  auto slot = [&](std::size_t k, int c) { return align_like(tmp + ((k % 2) * 2 + c) * slot_elems, at(k)); };
  std::vector<Request> from_kids(static_cast<std::size_t>(2 * kids)), sends;
  auto recv_kids = [&](std::size_t k) {
    for (int c = 0; c < kids; ++c) from_kids[(k % 2) * kids + c] = tr.irecv(slot(k, c), bytes(k), s.child(c));
  };

  if (early) recv_kids(0);
  for (std::size_t k = 0; k <= chunks; ++k) {
    auto g = tr.group();
    if (k < chunks && !early) recv_kids(k);
    if (k > 0 && parent >= 0) sends.push_back(tr.isend(at(k - 1), bytes(k - 1), parent));
    g.end();
    if (k < chunks) {
      for (int c = 0; c < kids; ++c) tr.wait(from_kids[(k % 2) * kids + c]);
      if (early && k + 1 < chunks) recv_kids(k + 1);
      for (int c = 0; c < kids; ++c) reduce(at(k), slot(k, c), s.chunk(n, k).count);
    }
  }
  tr.wait_all(sends);
}

// Pipelined tree broadcast of buf[0, n) from s.root: step k receives chunk k from the parent while
// chunk k - 1 goes to the children, the mirror image of tree_reduce.
template <typename T, typename Transport>
void tree_broadcast(Transport& tr, const TreeSchedule& s, T* buf, std::size_t n) {
  using Request = typename Transport::Request;
  constexpr bool early = !Transport::kStreamOrdered;
  const std::size_t chunks = s.num_chunks(n);
  const int kids = s.num_children(), parent = s.parent();
  if (s.size == 1 || chunks == 0) return;

  auto at = [&](std::size_t k) { return buf + s.chunk(n, k).begin; };
  auto bytes = [&](std::size_t k) { return s.chunk(n, k).count * sizeof(T); };
  std::vector<Request> from_parent(2), sends;
  auto recv_parent = [&](std::size_t k) {
    if (k < chunks && parent >= 0) from_parent[k % 2] = tr.irecv(at(k), bytes(k), parent);
  };
  if (early) recv_parent(0);
  for (std::size_t k = 0; k <= chunks; ++k) {
    auto g = tr.group();
    if (!early) recv_parent(k);
    if (k > 0)
      for (int c = 0; c < kids; ++c) sends.push_back(tr.isend(at(k - 1), bytes(k - 1), s.child(c)));
    g.end();
    if (k < chunks && parent >= 0) tr.wait(from_parent[k % 2]);
    if (early) recv_parent(k + 1);
  }
  tr.wait_all(sends);
}

// In-place pipelined tree all-reduce of buf[0, n): the reduce, then the broadcast from the root
// (which overwrites buf, so every send of the reduce has left it by then).
template <typename T, typename Transport, typename Reducer>
void tree_allreduce(Transport& tr, Reducer& reduce, const TreeSchedule& s, T* buf, T* tmp, std::size_t n) {
  tree_reduce(tr, reduce, s, buf, tmp, n);
  tree_broadcast(tr, s, buf, n);
}

// Pairwise-exchange all-to-all: blocks of `block` elements, block j of send going to rank j and
// block i of recv coming from rank i. Step d = 0..p-1 exchanges with ranks r + d and r - d (d = 0
// is this rank's own block), so every step pairs each rank with one sender and one receiver.
template <typename T, typename Transport>
void pairwise_alltoall(Transport& tr, int rank, int size, const T* send, T* recv, std::size_t block) {
  const std::size_t bytes = block * sizeof(T);
  for (int d = 0; d < size; ++d) {
    const int to = wrap(rank + d, size), from = wrap(rank - d, size);
    tr.sendrecv(send + static_cast<std::size_t>(to) * block, bytes, to, recv + static_cast<std::size_t>(from) * block,
                bytes, from);
  }
}

// Binomial gather (BinomialSchedule): `buf` holds this rank's subtree in relative order, span()
// blocks of `block` elements, its own block first. The children's subtrees are received into their
// places in one group, then the whole subtree goes to the parent.
template <typename T, typename Transport>
void binomial_gather(Transport& tr, const BinomialSchedule& s, T* buf, std::size_t block) {
  using Request = typename Transport::Request;
  const std::size_t bytes = block * sizeof(T);
  std::vector<Request> pending;
  auto g = tr.group();
  for (int i = 0; i < s.num_children(); ++i) {
    const int m = 1 << i;
    pending.push_back(tr.irecv(buf + static_cast<std::size_t>(m) * block, static_cast<std::size_t>(s.span_of(s.rel() + m)) * bytes,
                               s.abs(s.rel() + m)));
  }
  g.end();
  tr.wait_all(pending);
  if (s.parent() < 0) return;
  auto up = tr.group();
  pending.push_back(tr.isend(buf, static_cast<std::size_t>(s.span()) * bytes, s.parent()));
  up.end();
  tr.wait_all(pending);
}

// Binomial scatter, the gather reversed: this rank's subtree arrives from the parent into `buf`
// (relative order, its own block first; the root's is there already), then each child's part of it
// goes down, farthest child first, in one group.
template <typename T, typename Transport>
void binomial_scatter(Transport& tr, const BinomialSchedule& s, T* buf, std::size_t block) {
  using Request = typename Transport::Request;
  const std::size_t bytes = block * sizeof(T);
  std::vector<Request> pending;
  if (s.parent() >= 0) {
    auto g = tr.group();
    pending.push_back(tr.irecv(buf, static_cast<std::size_t>(s.span()) * bytes, s.parent()));
    g.end();
    tr.wait_all(pending);
  }
  auto g = tr.group();
  for (int i = s.num_children() - 1; i >= 0; --i) {
    const int m = 1 << i;
    pending.push_back(tr.isend(buf + static_cast<std::size_t>(m) * block, static_cast<std::size_t>(s.span_of(s.rel() + m)) * bytes,
                               s.abs(s.rel() + m)));
  }
  g.end();
  tr.wait_all(pending);
}

}  // namespace commbench
