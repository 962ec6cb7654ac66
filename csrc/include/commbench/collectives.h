// Executors that walk a schedule (schedule.h) over any transport and any reducer. The host binds
// them to MPI point-to-point and the loop in reduce.h; the device path binds the same executors to
// its own transport and a kernel that calls the same functor.
//
// A Transport provides:
//   using Request = ...;
//   void sendrecv(const void* s, size_t sbytes, int dst, void* r, size_t rbytes, int src);
//   Request isend(const void* p, size_t bytes, int peer);
//   Request irecv(void* p, size_t bytes, int peer);
//   void wait(Request&);  void wait_all(std::vector<Request>&);
// A Reducer provides: void operator()(T* dst, const T* src, size_t count)  // dst = op(dst, src)
#pragma once

#include <vector>

#include "commbench/schedule.h"

namespace commbench {

// In-place ring all-reduce of buf[0, n). tmp must hold the largest ring chunk (ceil(n / p)).
template <typename T, typename Transport, typename Reducer>
void ring_allreduce(Transport& tr, Reducer& reduce, const RingSchedule& s, T* buf, T* tmp,
                    std::size_t n) {
  for (int st = 0; st < s.steps(); ++st) {
    const RingStep step = s.step(st);
    const Span out = s.chunk(n, step.send_chunk), in = s.chunk(n, step.recv_chunk);
    T* landing = step.reduce ? tmp : buf + in.begin;
    tr.sendrecv(buf + out.begin, out.count * sizeof(T), step.send_peer, landing,
                in.count * sizeof(T), step.recv_peer);
    if (step.reduce) reduce(buf + in.begin, tmp, in.count);
  }
}

// In-place pipelined tree all-reduce of buf[0, n). tmp must hold 4 * chunk_elems elements: two
// pipeline slots for each of up to two children, so chunk k + 1 arrives while chunk k is reduced.
template <typename T, typename Transport, typename Reducer>
void tree_allreduce(Transport& tr, Reducer& reduce, const TreeSchedule& s, T* buf, T* tmp,
                    std::size_t n) {
  using Request = typename Transport::Request;
  const std::size_t chunks = s.num_chunks(n);
  const int kids = s.num_children(), parent = s.parent();
  if (s.size == 1 || chunks == 0) return;

  auto slot = [&](std::size_t k, int c) { return tmp + ((k % 2) * 2 + c) * s.chunk_elems; };
  std::vector<Request> pending(4), sends;
  auto post_children = [&](std::size_t k) {
    const Span sp = s.chunk(n, k);
    for (int c = 0; c < kids; ++c)
      pending[(k % 2) * 2 + c] = tr.irecv(slot(k, c), sp.count * sizeof(T), s.child(c));
  };

  // Reduce towards the root.
  if (kids > 0) post_children(0);
  for (std::size_t k = 0; k < chunks; ++k) {
    const Span sp = s.chunk(n, k);
    for (int c = 0; c < kids; ++c) tr.wait(pending[(k % 2) * 2 + c]);
    // The other slot was consumed at k - 1, so it can take chunk k + 1 now.
    if (kids > 0 && k + 1 < chunks) post_children(k + 1);
    for (int c = 0; c < kids; ++c) reduce(buf + sp.begin, slot(k, c), sp.count);
    if (parent >= 0) sends.push_back(tr.isend(buf + sp.begin, sp.count * sizeof(T), parent));
  }
  tr.wait_all(sends);
  sends.clear();

  // Broadcast the result back down, posting the receive of chunk k + 1 before forwarding chunk k,
  // so that a stream-ordered transport pipelines as well as a request-based one.
  auto from_parent = [&](std::size_t k) {
    const Span sp = s.chunk(n, k);
    return tr.irecv(buf + sp.begin, sp.count * sizeof(T), parent);
  };
  Request incoming;
  if (parent >= 0) incoming = from_parent(0);
  for (std::size_t k = 0; k < chunks; ++k) {
    const Span sp = s.chunk(n, k);
    if (parent >= 0) {
      tr.wait(incoming);
      if (k + 1 < chunks) incoming = from_parent(k + 1);
    }
    for (int c = 0; c < kids; ++c)
      sends.push_back(tr.isend(buf + sp.begin, sp.count * sizeof(T), s.child(c)));
  }
  tr.wait_all(sends);
}

}  // namespace commbench
