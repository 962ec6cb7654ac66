"""How the ranks came to exist and how they stay in touch: the world (MPI, torchrun, standalone
re-exec under the bundled mpirun), the rendezvous, and the watchdog that ends a stalled run."""
