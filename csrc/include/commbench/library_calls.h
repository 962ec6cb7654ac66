// Each collective as the libraries run it, side by side: its value in the Collective enum (under the
// name Python's registry, commbench/collectives/, gives it), the MPI library's call (impl "mpi",
// commbench._host) and NCCL's (impl "nccl", commbench._cuda), on buffers laid out as nccl-tests lays
// them out. A collective that only the libraries run is this file and its Python module. Each
// extension compiles the part of its library (setup.py defines COMMBENCH_WITH_MPI or
// COMMBENCH_WITH_NCCL); where MPI's in-place convention differs from nccl-tests' the difference is
// bridged here, inside the timed call, as a caller of MPI would have to. NCCL has no send-recv
// collective, and no all-to-all, gather or scatter before 2.28: like nccl-tests, those are one group of
// point-to-point calls.
#pragma once

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <vector>

#include "commbench/reduce.h"
#include "commbench/schedule.h"

#if defined(COMMBENCH_WITH_MPI)
#include <mpi.h>

#include <cstring>

#include "mpi_transport.h"
#endif
#if defined(COMMBENCH_WITH_NCCL)
#include <cuda_runtime.h>
#include <nccl.h>

#include "errors.h"
#include "nccl_transport.h"

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
// Weak, so that an extension built against 2.28's headers still loads an older libnccl (NCCL_HOME, a
// system NCCL first on the library path), where the symbol is then null and the call is the group.
#pragma weak ncclAlltoAll
#pragma weak ncclGather
#pragma weak ncclScatter
#endif
#endif

namespace commbench {

// kCollectiveNames gives each value, in declaration order, its name in Python's registry: the only
// place a collective's name is tied to its value (collective_times.h exports the enum).
enum class Collective { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, SendRecv, Gather, Scatter };
inline constexpr const char* kCollectiveNames[] = {"allreduce", "allgather", "reducescatter", "broadcast", "reduce",
                                                   "alltoall",  "sendrecv",  "gather",        "scatter"};
inline const char* name_of(Collective c) { return kCollectiveNames[static_cast<int>(c)]; }

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
  bool device = false;  // GPU memory: host code may not touch it
};

#if defined(COMMBENCH_WITH_MPI)
// A copy within this rank's buffers that an MPI call's recipe needs (the broadcast root's input into
// its output, the in-place reduce-scatter's result to its place): memcpy in host memory; in GPU
// memory, which only a CUDA-aware library's call may be given and host code must not touch, the
// library copies, to this rank itself. The two ranges never overlap.
template <typename T>
void local_copy(T* dst, const T* src, std::size_t n, bool device, MPI_Datatype type) {
  if (n == 0) return;
  if (!device) {
    std::memcpy(dst, src, n * sizeof(T));
    return;
  }
  const int c = mpi_count(n);
  mpi_check(MPI_Sendrecv(src, c, type, 0, 12, dst, c, type, 0, 12, MPI_COMM_SELF, MPI_STATUS_IGNORE),
            "MPI_Sendrecv (local copy)");
}

// The MPI library's call for `coll`, its arguments fixed once, outside the timed loop, in both forms
// the library has: the blocking call (MPI_Allreduce, ...), which the sweeps time, and the non-blocking
// one (MPI_Iallreduce, ...), which `overlap` starts beside a computation. `start` begins it and adds
// its requests; once they complete, `finish` does what the blocking recipe does after its call.
struct MpiCall {
  std::function<void()> blocking;
  std::function<void(std::vector<MPI_Request>&)> start;
  std::function<void()> finish = [] {};
};

// One request of a non-blocking call, added to `reqs`.
inline MPI_Request& added(std::vector<MPI_Request>& reqs) { return reqs.emplace_back(MPI_REQUEST_NULL); }

template <typename T, typename Op>
MpiCall mpi_call(Collective coll, const CallBuffers<T>& b, const MpiOp<T, Op>& op, MPI_Comm comm) {
  using Reqs = std::vector<MPI_Request>;
  const MPI_Datatype type = mpi_type<T>();
  const MPI_Op mop = op.get();
  T* out = b.recv;
  const T* in = b.send;
  const void* sbuf = b.in_place ? MPI_IN_PLACE : static_cast<const void*>(in);
  switch (coll) {
    case Collective::AllReduce: {
      const int n = mpi_count(b.recv_count);
      return {[=] { mpi_check(MPI_Allreduce(sbuf, out, n, type, mop, comm), "MPI_Allreduce"); },
              [=](Reqs& r) { mpi_check(MPI_Iallreduce(sbuf, out, n, type, mop, comm, &added(r)), "MPI_Iallreduce"); }};
    }
    case Collective::AllGather: {
      const int c = mpi_count(b.send_count);
      mpi_count(b.recv_count);
      return {[=] { mpi_check(MPI_Allgather(sbuf, c, type, out, c, type, comm), "MPI_Allgather"); },
              [=](Reqs& r) { mpi_check(MPI_Iallgather(sbuf, c, type, out, c, type, comm, &added(r)), "MPI_Iallgather"); }};
    }
    case Collective::ReduceScatter: {
      const int c = mpi_count(b.recv_count);
      mpi_count(b.send_count);
      if (!b.in_place)
        return {[=] { mpi_check(MPI_Reduce_scatter_block(in, out, c, type, mop, comm), "MPI_Reduce_scatter_block"); },
                [=](Reqs& r) {
                  mpi_check(MPI_Ireduce_scatter_block(in, out, c, type, mop, comm, &added(r)), "MPI_Ireduce_scatter_block");
                }};
      // MPI leaves an in-place result at the start of the buffer; nccl-tests expects it at r*c.
      T* base = const_cast<T*>(in);
      const std::size_t shift = static_cast<std::size_t>(b.rank) * b.recv_count;
      const bool device = b.device;
      const std::function<void()> to_place = [=] {
        if (shift) local_copy(base + shift, base, b.recv_count, device, type);
      };
      return {[=] {
                mpi_check(MPI_Reduce_scatter_block(MPI_IN_PLACE, base, c, type, mop, comm), "MPI_Reduce_scatter_block");
                to_place();
              },
              [=](Reqs& r) {
                mpi_check(MPI_Ireduce_scatter_block(MPI_IN_PLACE, base, c, type, mop, comm, &added(r)),
                          "MPI_Ireduce_scatter_block");
              },
              to_place};
    }
    case Collective::Broadcast: {
      const int n = mpi_count(b.recv_count);
      const bool copy = !b.in_place && b.rank == b.root;
      const bool device = b.device;
      const std::function<void()> own_first = [=] {
        if (copy) local_copy(out, in, b.recv_count, device, type);  // MPI_Bcast has one buffer
      };
      return {[=] {
                own_first();
                mpi_check(MPI_Bcast(out, n, type, b.root, comm), "MPI_Bcast");
              },
              [=](Reqs& r) {
                own_first();
                mpi_check(MPI_Ibcast(out, n, type, b.root, comm, &added(r)), "MPI_Ibcast");
              }};
    }
    case Collective::Reduce: {
      const int n = mpi_count(b.recv_count);
      // Only the root may pass MPI_IN_PLACE; the others' data is their send buffer.
      const void* s = b.in_place && b.rank != b.root ? static_cast<const void*>(out) : sbuf;
      return {[=] { mpi_check(MPI_Reduce(s, out, n, type, mop, b.root, comm), "MPI_Reduce"); },
              [=](Reqs& r) { mpi_check(MPI_Ireduce(s, out, n, type, mop, b.root, comm, &added(r)), "MPI_Ireduce"); }};
    }
    case Collective::AllToAll: {
      const int c = mpi_count(b.send_count / static_cast<std::size_t>(b.size));
      return {[=] { mpi_check(MPI_Alltoall(in, c, type, out, c, type, comm), "MPI_Alltoall"); },
              [=](Reqs& r) { mpi_check(MPI_Ialltoall(in, c, type, out, c, type, comm, &added(r)), "MPI_Ialltoall"); }};
    }
    case Collective::SendRecv: {
      const int n = mpi_count(b.recv_count);
      const int right = wrap(b.rank + 1, b.size), left = wrap(b.rank - 1, b.size);
      return {[=] {
                mpi_check(MPI_Sendrecv(in, n, type, right, 11, out, n, type, left, 11, comm, MPI_STATUS_IGNORE),
                          "MPI_Sendrecv");
              },
              [=](Reqs& r) {
                mpi_check(MPI_Irecv(out, n, type, left, 11, comm, &added(r)), "MPI_Irecv");
                mpi_check(MPI_Isend(in, n, type, right, 11, comm, &added(r)), "MPI_Isend");
              }};
    }
    case Collective::Gather: {
      const int c = mpi_count(b.send_count);
      mpi_count(b.recv_count);
      // In place only the root passes MPI_IN_PLACE (its block lies at root*c already); the others
      // send their block from where it lies.
      const void* s = b.in_place && b.rank != b.root ? static_cast<const void*>(in) : sbuf;
      return {[=] { mpi_check(MPI_Gather(s, c, type, out, c, type, b.root, comm), "MPI_Gather"); },
              [=](Reqs& r) { mpi_check(MPI_Igather(s, c, type, out, c, type, b.root, comm, &added(r)), "MPI_Igather"); }};
    }
    case Collective::Scatter: {
      const int c = mpi_count(b.recv_count);
      mpi_count(b.send_count);
      // In place the root receives MPI_IN_PLACE: its block stays at root*c of its input, where
      // nccl-tests places its receive buffer.
      void* rb = b.in_place && b.rank == b.root ? MPI_IN_PLACE : static_cast<void*>(out);
      return {[=] { mpi_check(MPI_Scatter(in, c, type, rb, c, type, b.root, comm), "MPI_Scatter"); },
              [=](Reqs& r) { mpi_check(MPI_Iscatter(in, c, type, rb, c, type, b.root, comm, &added(r)), "MPI_Iscatter"); }};
    }
  }
  throw std::invalid_argument("no MPI call for this collective");  // reached only by a value outside the enum
}
#endif

#if defined(COMMBENCH_WITH_NCCL)
// NCCL's call for `coll`, enqueued on `stream`, its arguments fixed once, outside the timed loop.
template <typename T>
std::function<void()> nccl_call(Collective coll, const CallBuffers<T>& b, RedOp op, ncclComm_t comm,
                                cudaStream_t stream, const Where& w) {
  const ncclDataType_t type = nccl_type<T>();
  const ncclRedOp_t rop = nccl_op(op);
  T* out = b.recv;
  const T* in = b.send;
  switch (coll) {
    case Collective::AllReduce:
      return [=] { nccl_enqueued(ncclAllReduce(in, out, b.recv_count, type, rop, comm, stream), comm, "ncclAllReduce", w); };
    case Collective::AllGather:
      return [=] { nccl_enqueued(ncclAllGather(in, out, b.send_count, type, comm, stream), comm, "ncclAllGather", w); };
    case Collective::ReduceScatter:
      return [=] { nccl_enqueued(ncclReduceScatter(in, out, b.recv_count, type, rop, comm, stream), comm, "ncclReduceScatter", w); };
    case Collective::Broadcast:
      return [=] { nccl_enqueued(ncclBroadcast(in, out, b.recv_count, type, b.root, comm, stream), comm, "ncclBroadcast", w); };
    case Collective::Reduce:
      return [=] { nccl_enqueued(ncclReduce(in, out, b.recv_count, type, rop, b.root, comm, stream), comm, "ncclReduce", w); };
    case Collective::AllToAll: {
      const std::size_t block = b.send_count / static_cast<std::size_t>(b.size);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
      // NCCL's own all-to-all where the library has it, as nccl-tests calls it: on one H100 the group
      // of point-to-point calls read 10 us a call where ncclAlltoAll reads 7.5.
      if (ncclAlltoAll != nullptr)
        return [=] { nccl_enqueued(ncclAlltoAll(in, out, block, type, comm, stream), comm, "ncclAlltoAll", w); };
#endif
      return [=] {
        NcclGroup g(comm, w);
        for (int peer = 0; peer < b.size; ++peer) {
          nccl_enqueued(ncclSend(in + peer * block, block, type, peer, comm, stream), comm, "ncclSend", w);
          nccl_enqueued(ncclRecv(out + peer * block, block, type, peer, comm, stream), comm, "ncclRecv", w);
        }
        g.end();
      };
    }
    case Collective::SendRecv: {
      const int right = wrap(b.rank + 1, b.size), left = wrap(b.rank - 1, b.size);
      return [=] {
        NcclGroup g(comm, w);
        nccl_enqueued(ncclSend(in, b.send_count, type, right, comm, stream), comm, "ncclSend", w);
        nccl_enqueued(ncclRecv(out, b.recv_count, type, left, comm, stream), comm, "ncclRecv", w);
        g.end();
      };
    }
    case Collective::Gather: {
      const std::size_t c = b.send_count;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
      if (ncclGather != nullptr)
        return [=] { nccl_enqueued(ncclGather(in, out, c, type, b.root, comm, stream), comm, "ncclGather", w); };
#endif
      // Before 2.28, as nccl-tests calls it: every rank sends its block to the root, which receives
      // them all in one group (its own included).
      return [=] {
        NcclGroup g(comm, w);
        nccl_enqueued(ncclSend(in, c, type, b.root, comm, stream), comm, "ncclSend", w);
        if (b.rank == b.root)
          for (int peer = 0; peer < b.size; ++peer)
            nccl_enqueued(ncclRecv(out + peer * c, c, type, peer, comm, stream), comm, "ncclRecv", w);
        g.end();
      };
    }
    case Collective::Scatter: {
      const std::size_t c = b.recv_count;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
      if (ncclScatter != nullptr)
        return [=] { nccl_enqueued(ncclScatter(in, out, c, type, b.root, comm, stream), comm, "ncclScatter", w); };
#endif
      return [=] {
        NcclGroup g(comm, w);
        if (b.rank == b.root)
          for (int peer = 0; peer < b.size; ++peer)
            nccl_enqueued(ncclSend(in + peer * c, c, type, peer, comm, stream), comm, "ncclSend", w);
        nccl_enqueued(ncclRecv(out, c, type, b.root, comm, stream), comm, "ncclRecv", w);
        g.end();
      };
    }
  }
  throw std::invalid_argument("no NCCL call for this collective");  // reached only by a value outside the enum
}
#endif

}  // namespace commbench
