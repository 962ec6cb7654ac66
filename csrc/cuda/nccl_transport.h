// NCCL point-to-point as a collectives.h transport. Operations are enqueued on one stream, so stream
// order replaces request completion: wait() has nothing to do. A send/recv pair of one ring step goes
// in one NCCL group so that both directions progress together.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <vector>

#include "errors.h"

namespace commbench {

class NcclTransport {
 public:
  struct Request {};

  NcclTransport(ncclComm_t comm, cudaStream_t stream, const Where& where)
      : comm_(comm), stream_(stream), where_(where) {}

  void sendrecv(const void* s, std::size_t sbytes, int dst, void* r, std::size_t rbytes, int src) {
    nccl_check(ncclGroupStart(), "ncclGroupStart", where_);
    nccl_check(ncclSend(s, sbytes, ncclUint8, dst, comm_, stream_), "ncclSend", where_);
    nccl_check(ncclRecv(r, rbytes, ncclUint8, src, comm_, stream_), "ncclRecv", where_);
    nccl_check(ncclGroupEnd(), "ncclGroupEnd", where_);
  }

  Request isend(const void* p, std::size_t bytes, int peer) {
    nccl_check(ncclSend(p, bytes, ncclUint8, peer, comm_, stream_), "ncclSend", where_);
    return {};
  }

  Request irecv(void* p, std::size_t bytes, int peer) {
    nccl_check(ncclRecv(p, bytes, ncclUint8, peer, comm_, stream_), "ncclRecv", where_);
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
