// The compute delay of --delay: a busy wait on the steady clock. A sleep would hand the core to the
// scheduler and wake late by an amount of its own choosing; spinning ends within a clock read of the
// asked time, as a rank busy with its own compute would.
#pragma once

#include <chrono>

namespace commbench {

// Spins for `seconds`, calling poll() on every turn.
template <typename Poll>
void spin_for(double seconds, Poll&& poll) {
  if (!(seconds > 0)) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) poll();
}

inline void spin_for(double seconds) {
  spin_for(seconds, [] {});
}

}  // namespace commbench
