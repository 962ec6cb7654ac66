// The part of NCCL's API that commbench._cuda calls, for its emulated build (tests/emu): communicators
// between the processes of one host over shared memory, every call enqueued on its CUDA stream, a
// group complete only once its peers' matching groups are posted. Test infrastructure, never part of
// an installed commbench. Names and values are NCCL's own.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 0
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)
#define NCCL_UNIQUE_ID_BYTES 128
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_CONFIG_UNDEF_INT (-2147483647 - 1)

typedef struct ncclComm* ncclComm_t;
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

typedef enum {
  ncclInt8 = 0, ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2, ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6, ncclHalf = 6,
  ncclFloat32 = 7, ncclFloat = 7,
  ncclFloat64 = 8, ncclDouble = 8,
  ncclBfloat16 = 9,
} ncclDataType_t;

typedef struct {
  std::size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int splitShare;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER \
  { sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION_CODE, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT }

// C linkage, as NCCL declares its API: the extension may take a call's address (a weak one, ncclAlltoAll).
extern "C" {
ncclResult_t ncclGetVersion(int*);
ncclResult_t ncclGetUniqueId(ncclUniqueId*);
const char* ncclGetErrorString(ncclResult_t);
const char* ncclGetLastError(ncclComm_t);

ncclResult_t ncclCommInitRank(ncclComm_t*, int nranks, ncclUniqueId, int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t*, int nranks, ncclUniqueId, int rank, ncclConfig_t*);
ncclResult_t ncclCommSplit(ncclComm_t, int color, int key, ncclComm_t*, ncclConfig_t*);
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t*);
ncclResult_t ncclCommCount(const ncclComm_t, int*);
ncclResult_t ncclCommUserRank(const ncclComm_t, int*);
ncclResult_t ncclCommDestroy(ncclComm_t);
ncclResult_t ncclCommAbort(ncclComm_t);

ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();

ncclResult_t ncclSend(const void*, std::size_t, ncclDataType_t, int peer, ncclComm_t, cudaStream_t);
ncclResult_t ncclRecv(void*, std::size_t, ncclDataType_t, int peer, ncclComm_t, cudaStream_t);
ncclResult_t ncclAllReduce(const void*, void*, std::size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
ncclResult_t ncclReduce(const void*, void*, std::size_t, ncclDataType_t, ncclRedOp_t, int root, ncclComm_t,
                        cudaStream_t);
ncclResult_t ncclBroadcast(const void*, void*, std::size_t, ncclDataType_t, int root, ncclComm_t, cudaStream_t);
ncclResult_t ncclAllGather(const void*, void*, std::size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
ncclResult_t ncclReduceScatter(const void*, void*, std::size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                               cudaStream_t);
ncclResult_t ncclAlltoAll(const void*, void*, std::size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
ncclResult_t ncclGather(const void*, void*, std::size_t, ncclDataType_t, int root, ncclComm_t, cudaStream_t);
ncclResult_t ncclScatter(const void*, void*, std::size_t, ncclDataType_t, int root, ncclComm_t, cudaStream_t);
}  // extern "C"
