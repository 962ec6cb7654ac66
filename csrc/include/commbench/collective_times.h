// The timed collective of both extensions, written once: argument checks, the buffers in nccl-tests'
// layout, the library call or our algorithm (own_algorithms.h), the scratch our algorithm needs and
// the timed loop. What the extensions do differently is a Backend:
//   commbench._host (csrc/host/module.cpp): MPI, the reduction loop of reduce.h, the steady clock;
//   commbench._cuda (csrc/cuda/device_comm.h): NCCL, the reduction kernel, CUDA events and graphs,
//   every wait bounded by the deadline.
//
// A Backend provides:
//   static constexpr const char* kLibrary;   // the impl name of its library call ("mpi", "nccl")
//   int rank(); int size();
//   void check_buffers(const Buffer& send, const Buffer& recv, Algorithm);  // throws
//   Transport transport();                   // point-to-point for the executors (collectives.h)
//   template <T, Op> Reducer reducer();      // reducer(dst, src, n): dst = op(dst, src)
//   Copy copy();                             // copy(dst, src, n) within this rank's memory
//   template <T> T* scratch(size_t n);       // n elements, kept at least as long as the Backend
//   template <T, Op> std::function<void()> library_call(Collective, const CallBuffers<T>&, RedOp);
//   Group library_group();                   // what fuses `agg` library calls (own_algorithms.h)
//   template <Body> std::vector<double> time(int64_t iters, int64_t calls, double delay_s, const std::string& what, Body&&);
//       // this rank's seconds per sample: each sample `calls` back-to-back body() calls after a
//       // barrier and, outside the timed interval, the delay; `what` names the call in a timeout
//
// Python calls it with the GIL released (the bindings' call guard): nothing here touches a Python
// object.
#pragma once

#include <pybind11/pybind11.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "commbench/buffer.h"
#include "commbench/own_algorithms.h"
#include "commbench/reduce.h"

namespace commbench {

// Seconds per sample -> seconds per call.
inline std::vector<double> per_call(std::vector<double> t, int64_t calls) {
  for (double& x : t) x /= static_cast<double>(calls);
  return t;
}

// Times one call of collective `coll` by `algo` on `backend`: its library call or one of our
// algorithms over its point-to-point calls. send and recv are laid out as nccl-tests lays them out,
// overlapping when in place. Returns this rank's own seconds per call, one figure per sample: `agg`
// calls make one operation (fused into one group where the library allows), a sample times `loop`
// operations back to back after a barrier (1: the per-iteration timing; more: the loop of
// nccl-tests and OSU), and `delay_s` delays this rank before each sample.
template <typename Backend>
std::vector<double> collective_times(Backend& backend, Collective coll, Algorithm algo, const Buffer& send,
                                     const Buffer& recv, int64_t op_code, int64_t root, int64_t iters, int64_t chunk_bytes,
                                     int64_t agg, double delay_s, int64_t loop) {
  if (agg < 1) throw std::invalid_argument("agg must be at least 1");
  if (loop < 1) throw std::invalid_argument("loop must be at least 1");
  if (iters < 0) throw std::invalid_argument("iters must not be negative");
  if (!(delay_s >= 0) || !std::isfinite(delay_s)) throw std::invalid_argument("delay must be finite and not negative");
  backend.check_buffers(send, recv, algo);
  if (send.dtype != recv.dtype) throw std::invalid_argument("send and recv buffers differ in dtype");
  if (root < 0 || root >= backend.size()) throw std::invalid_argument("root must be a rank of the communicator");
  const RedOp op = redop_from(op_code);
  const bool library = algo == Algorithm::Library;
  const std::string what = std::string(name_of(coll)) + " " + (library ? Backend::kLibrary : name_of(algo));
  return dispatch_dtype_op(recv.dtype, op, [&](auto tag, auto functor) {
    using T = typename decltype(tag)::type;
    using Op = decltype(functor);
    const CallBuffers<T> b{static_cast<const T*>(send.data), static_cast<T*>(recv.data), send.count, recv.count,
                           overlap(send, recv), backend.rank(), backend.size(), static_cast<int>(root), !send.on_host()};
    if (library) {
      auto call = backend.template library_call<T, Op>(coll, b, op);
      return per_call(backend.time(iters, loop, delay_s, what, aggregated(call, agg, [&] { return backend.library_group(); })),
                      agg * loop);
    }
    const Own own = own_algo(coll, algo);
    if (pipelined(own) && chunk_bytes < static_cast<int64_t>(sizeof(T)))
      throw std::invalid_argument("pipeline chunk must hold at least one element");
    const std::size_t chunk =
        TreeSchedule::chunk_for(static_cast<std::size_t>(std::max<int64_t>(chunk_bytes, 1)), sizeof(T), b.recv_count);
    auto transport = backend.transport();
    auto reducer = backend.template reducer<T, Op>();
    auto copy = backend.copy();
    T* scratch = backend.template scratch<T>(own_scratch_elems<T>(own, b, chunk));
    return per_call(backend.time(iters, loop, delay_s, what,
                                 aggregated(own_call(own, transport, reducer, copy, b, scratch, chunk), agg, no_group)),
                    agg * loop);
  });
}

// Collective and Algorithm for Python, under the names of own_algorithms.h. Module-local: each
// extension registers its own, as each may be loaded without the other, and two global
// registrations of one C++ type would clash.
inline void bind_collective_enums(pybind11::module& m) {
  auto bind = [&m](auto first, const char* type, const auto& names) {
    using E = decltype(first);
    pybind11::enum_<E> e(m, type, pybind11::module_local());
    for (std::size_t i = 0; i < std::size(names); ++i) e.value(names[i], static_cast<E>(i));
  };
  bind(Collective{}, "Collective", kCollectiveNames);
  bind(Algorithm{}, "Algorithm", kAlgorithmNames);
}

}  // namespace commbench
