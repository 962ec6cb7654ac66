// The MPI library's own call for each collective (impl "mpi"), on buffers laid out as nccl-tests lays
// them out (own_algorithms.h, CallBuffers). Where MPI's in-place convention differs from nccl-tests'
// the difference is bridged here, inside the timed call, as a caller of MPI would have to.
#pragma once

#include <mpi.h>

#include <climits>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "commbench/own_algorithms.h"
#include "commbench/reduce.h"
#include "mpi_transport.h"

namespace commbench {

template <typename T> MPI_Datatype mpi_type() { return MPI_UINT16_T; }  // 16-bit floats
template <> inline MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <> inline MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }
template <> inline MPI_Datatype mpi_type<int32_t>() { return MPI_INT32_T; }
template <> inline MPI_Datatype mpi_type<int64_t>() { return MPI_INT64_T; }

// MPI has no 16-bit float types, so those reduce through a user-defined op that runs our functor.
template <typename T, typename Op>
void mpi_user_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_into(static_cast<T*>(inout), static_cast<const T*>(in), static_cast<std::size_t>(*len), Op{});
}

// The MPI_Op for (T, Op): a built-in one, or a user-defined one freed with this object.
template <typename T, typename Op>
class MpiOp {
 public:
  explicit MpiOp(RedOp op) {
    if (std::is_same<T, c10::Half>::value || std::is_same<T, c10::BFloat16>::value) {
      mpi_check(MPI_Op_create(&mpi_user_reduce<T, Op>, 1, &op_), "MPI_Op_create");
      user_ = true;
      return;
    }
    switch (op) {
      case RedOp::Prod: op_ = MPI_PROD; break;
      case RedOp::Max: op_ = MPI_MAX; break;
      case RedOp::Min: op_ = MPI_MIN; break;
      default: op_ = MPI_SUM;
    }
  }
  ~MpiOp() {
    if (user_) MPI_Op_free(&op_);
  }
  MPI_Op get() const { return op_; }
  MpiOp(const MpiOp&) = delete;
  MpiOp& operator=(const MpiOp&) = delete;

 private:
  MPI_Op op_ = MPI_OP_NULL;
  bool user_ = false;
};

inline int mpi_count(std::size_t n) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw std::invalid_argument("impl mpi: more than 2^31-1 elements in one MPI call");
  return static_cast<int>(n);
}

template <typename T, typename Op>
std::function<void()> mpi_call(Collective coll, const CallBuffers<T>& b, const MpiOp<T, Op>& op, MPI_Comm comm) {
  const MPI_Datatype type = mpi_type<T>();
  const MPI_Op mop = op.get();
  T* out = b.recv;
  const T* in = b.send;
  const void* sbuf = b.in_place ? MPI_IN_PLACE : static_cast<const void*>(in);
  switch (coll) {
    case Collective::AllReduce: {
      const int n = mpi_count(b.recv_count);
      return [=] { mpi_check(MPI_Allreduce(sbuf, out, n, type, mop, comm), "MPI_Allreduce"); };
    }
    case Collective::AllGather: {
      const int c = mpi_count(b.send_count);
      mpi_count(b.recv_count);
      return [=] { mpi_check(MPI_Allgather(sbuf, c, type, out, c, type, comm), "MPI_Allgather"); };
    }
    case Collective::ReduceScatter: {
      const int c = mpi_count(b.recv_count);
      mpi_count(b.send_count);
      if (!b.in_place)
        return [=] { mpi_check(MPI_Reduce_scatter_block(in, out, c, type, mop, comm), "MPI_Reduce_scatter_block"); };
      // MPI leaves an in-place result at the start of the buffer; nccl-tests expects it at r*c.
      T* base = const_cast<T*>(in);
      const std::size_t shift = static_cast<std::size_t>(b.rank) * b.recv_count;
      return [=] {
        mpi_check(MPI_Reduce_scatter_block(MPI_IN_PLACE, base, c, type, mop, comm), "MPI_Reduce_scatter_block");
        if (shift) std::memmove(base + shift, base, b.recv_count * sizeof(T));
      };
    }
    case Collective::Broadcast: {
      const int n = mpi_count(b.recv_count);
      const bool copy = !b.in_place && b.rank == b.root;
      return [=] {
        if (copy) std::memcpy(out, in, b.recv_count * sizeof(T));  // MPI_Bcast has one buffer
        mpi_check(MPI_Bcast(out, n, type, b.root, comm), "MPI_Bcast");
      };
    }
    case Collective::Reduce: {
      const int n = mpi_count(b.recv_count);
      // Only the root may pass MPI_IN_PLACE; the others' data is their send buffer.
      const void* s = b.in_place && b.rank != b.root ? static_cast<const void*>(out) : sbuf;
      return [=] { mpi_check(MPI_Reduce(s, out, n, type, mop, b.root, comm), "MPI_Reduce"); };
    }
    case Collective::AllToAll: {
      const int c = mpi_count(b.send_count / static_cast<std::size_t>(b.size));
      return [=] { mpi_check(MPI_Alltoall(in, c, type, out, c, type, comm), "MPI_Alltoall"); };
    }
    case Collective::SendRecv: {
      const int n = mpi_count(b.recv_count);
      const int right = wrap(b.rank + 1, b.size), left = wrap(b.rank - 1, b.size);
      return [=] {
        mpi_check(MPI_Sendrecv(in, n, type, right, 11, out, n, type, left, 11, comm, MPI_STATUS_IGNORE), "MPI_Sendrecv");
      };
    }
  }
  throw std::invalid_argument("no MPI call for this collective");  // reached only by a value outside the enum
}

}  // namespace commbench
