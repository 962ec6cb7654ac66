// NCCL in commbench._cuda: its datatypes and reductions for our dtypes (library_calls.h), and its
// point-to-point as a collectives.h transport. Operations are enqueued on one stream, so stream
// order replaces request completion: wait() has nothing to do, and what must progress together goes
// into one NCCL group (NcclGroup).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "commbench/reduce.h"
#include "errors.h"
#include "gate.h"

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

// ncclGroupStart now, ncclGroupEnd at end() or, if an exception leaves the scope first, in the
// destructor: a group left open would silently defer every later NCCL call of this thread. The group's
// calls are on `comm`, whose enqueuing end() waits for (nccl_enqueued).
class NcclGroup {
 public:
  NcclGroup(ncclComm_t comm, const Where& w) : comm_(comm), where_(w) {
    nccl_check(ncclGroupStart(), "ncclGroupStart", where_);
  }
  void end() {
    open_ = false;
    nccl_enqueued(ncclGroupEnd(), comm_, "ncclGroupEnd", where_);
    Gate::enqueued();
  }
  ~NcclGroup() {
    if (open_) ncclGroupEnd();  // unwinding already: the first error is the one reported
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

 private:
  ncclComm_t comm_;
  Where where_;
  bool open_ = true;
};

class NcclTransport {
 public:
  struct Request {};
  using Group = NcclGroup;
  static constexpr bool kStreamOrdered = true;

  NcclTransport(ncclComm_t comm, cudaStream_t stream, const Where& where)
      : comm_(comm), stream_(stream), where_(where) {}

  NcclGroup group() { return NcclGroup(comm_, where_); }

  void sendrecv(const void* s, std::size_t sbytes, int dst, void* r, std::size_t rbytes, int src) {
    NcclGroup g(comm_, where_);
    isend(s, sbytes, dst);
    irecv(r, rbytes, src);
    g.end();
  }

  Request isend(const void* p, std::size_t bytes, int peer) {
    nccl_enqueued(ncclSend(p, bytes, ncclUint8, peer, comm_, stream_), comm_, "ncclSend", where_);
    return {};
  }

  Request irecv(void* p, std::size_t bytes, int peer) {
    nccl_enqueued(ncclRecv(p, bytes, ncclUint8, peer, comm_, stream_), comm_, "ncclRecv", where_);
    return {};
  }

  void wait(Request&) {}
  void wait_all(std::vector<Request>&) {}

 private:
  ncclComm_t comm_;
  cudaStream_t stream_;
  Where where_;
};

}  // namespace commbench
