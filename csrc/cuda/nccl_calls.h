// NCCL's own call for each collective (impl "nccl"), on buffers laid out as nccl-tests lays them out
// (own_algorithms.h, CallBuffers). NCCL has no all-to-all or send-recv collective: like nccl-tests,
// those are one group of point-to-point calls.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <functional>
#include <stdexcept>
#include <string>

#include "commbench/own_algorithms.h"
#include "commbench/reduce.h"
#include "errors.h"
#include "nccl_transport.h"

namespace commbench {

template <typename T> ncclDataType_t nccl_type();
template <> inline ncclDataType_t nccl_type<float>() { return ncclFloat32; }
template <> inline ncclDataType_t nccl_type<double>() { return ncclFloat64; }
template <> inline ncclDataType_t nccl_type<c10::Half>() { return ncclFloat16; }
template <> inline ncclDataType_t nccl_type<c10::BFloat16>() { return ncclBfloat16; }
template <> inline ncclDataType_t nccl_type<int32_t>() { return ncclInt32; }
template <> inline ncclDataType_t nccl_type<int64_t>() { return ncclInt64; }

inline ncclRedOp_t nccl_op(RedOp op) {
  switch (op) {
    case RedOp::Prod: return ncclProd;
    case RedOp::Max: return ncclMax;
    case RedOp::Min: return ncclMin;
    default: return ncclSum;
  }
}

template <typename T>
std::function<void()> nccl_call(Collective coll, const CallBuffers<T>& b, RedOp op, ncclComm_t comm,
                                cudaStream_t stream, const Where& w) {
  const ncclDataType_t type = nccl_type<T>();
  const ncclRedOp_t rop = nccl_op(op);
  T* out = b.recv;
  const T* in = b.send;
  switch (coll) {
    case Collective::AllReduce:
      return [=] { nccl_check(ncclAllReduce(in, out, b.recv_count, type, rop, comm, stream), "ncclAllReduce", w); };
    case Collective::AllGather:
      return [=] { nccl_check(ncclAllGather(in, out, b.send_count, type, comm, stream), "ncclAllGather", w); };
    case Collective::ReduceScatter:
      return [=] { nccl_check(ncclReduceScatter(in, out, b.recv_count, type, rop, comm, stream), "ncclReduceScatter", w); };
    case Collective::Broadcast:
      return [=] { nccl_check(ncclBroadcast(in, out, b.recv_count, type, b.root, comm, stream), "ncclBroadcast", w); };
    case Collective::Reduce:
      return [=] { nccl_check(ncclReduce(in, out, b.recv_count, type, rop, b.root, comm, stream), "ncclReduce", w); };
    case Collective::AllToAll: {
      const std::size_t block = b.send_count / static_cast<std::size_t>(b.size);
      return [=] {
        NcclGroup g(w);
        for (int peer = 0; peer < b.size; ++peer) {
          nccl_check(ncclSend(in + peer * block, block, type, peer, comm, stream), "ncclSend", w);
          nccl_check(ncclRecv(out + peer * block, block, type, peer, comm, stream), "ncclRecv", w);
        }
        g.end();
      };
    }
    case Collective::SendRecv: {
      const int right = wrap(b.rank + 1, b.size), left = wrap(b.rank - 1, b.size);
      return [=] {
        NcclGroup g(w);
        nccl_check(ncclSend(in, b.send_count, type, right, comm, stream), "ncclSend", w);
        nccl_check(ncclRecv(out, b.recv_count, type, left, comm, stream), "ncclRecv", w);
        g.end();
      };
    }
  }
  throw std::invalid_argument("no NCCL call for this collective");  // reached only by a value outside the enum
}

}  // namespace commbench
