// Index arithmetic for 16-byte vector accesses, shared by the device reduction and copy kernels and
// tested on the host. Chunks of a ring or tree start at arbitrary element offsets, so a kernel peels
// a scalar head up to the destination's alignment, runs whole 16-byte packs, and finishes with a
// scalar tail. One peel aligns both sides only when source and destination are equally misaligned,
// which is why scratch slots are placed with the destination's misalignment (align_like).
#pragma once

#include <cstddef>
#include <cstdint>

namespace commbench {

constexpr std::size_t kVecBytes = 16;

struct VecSplit {
  std::size_t head;   // scalar elements before the first aligned pack
  std::size_t packs;  // whole 16-byte packs
  std::size_t tail;   // scalar elements after the last pack
};

// Split of n elements of elem_bytes at addresses dst and src; all scalar when the two cannot be
// aligned together.
inline VecSplit vec_split(std::uintptr_t dst, std::uintptr_t src, std::size_t n, std::size_t elem_bytes) {
  const std::size_t mis = dst % kVecBytes;
  if (elem_bytes == 0 || kVecBytes % elem_bytes != 0 || mis != src % kVecBytes || mis % elem_bytes != 0)
    return VecSplit{n, 0, 0};
  const std::size_t head = ((kVecBytes - mis) % kVecBytes) / elem_bytes;
  if (head >= n) return VecSplit{n, 0, 0};
  const std::size_t lanes = kVecBytes / elem_bytes, packs = (n - head) / lanes;
  return VecSplit{head, packs, n - head - packs * lanes};
}

// Elements of T that a scratch slot needs beyond its payload so that align_like can shift it.
template <typename T>
constexpr std::size_t align_slack() {
  return kVecBytes / sizeof(T) > 0 ? kVecBytes / sizeof(T) : 1;
}

// The address in a slot (whose start is 16-byte aligned and which holds align_slack<T>() spare
// elements) that is misaligned exactly as `like`, so a reduction between the two vectorises.
template <typename T>
T* align_like(T* slot, const T* like) {
  const std::uintptr_t base = reinterpret_cast<std::uintptr_t>(slot);
  const std::uintptr_t want = reinterpret_cast<std::uintptr_t>(like) % kVecBytes;
  const std::uintptr_t shift = (want + kVecBytes - base % kVecBytes) % kVecBytes;
  return reinterpret_cast<T*>(base + shift);
}

}  // namespace commbench
