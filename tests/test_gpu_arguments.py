"""Every argument list that the GPU tests and `make gpu-check` (the gpu-node plan) will run, parsed here, on a host
without a GPU, by commbench's own parsers (click's types and choices, then sizes, dtypes, ops and
impls) without running a command: a typo there would otherwise surface only on the GPU node."""


import pytest
from test_gpu import GPU_TEST_ARGS

from commbench import collectives
from commbench.accept import plan as plans
from commbench.cli import cli
from commbench.cli.accept import check_argv
from commbench.cli.measure import sweep_sizes
from commbench.collectives.dtypes import dtype_of, itemsize_of, redop_code
from commbench.sizes import parse_size, parse_sizes, round_to_itemsize
from commbench.transports import parse_impls

GPU_NODE = plans.load("gpu-node", check_argv)  # [defaults] and [quick] reach the commands that have the option


def parse(argv: list) -> dict:
    """The options of `commbench ARGV` as the command would receive them, each value checked by the
    parser the command applies to it."""
    group = cli.make_context("commbench", list(argv))
    name, command, rest = cli.resolve_command(group, list(argv))
    params = command.make_context(name, rest, parent=group).params
    if "sizes" in params:
        text = params["sizes"]
        if "min_bytes" in params:  # a collective: --sizes, nccl-tests' -b/-e/-f, or the default sweep
            text = sweep_sizes(text, params["min_bytes"], params["max_bytes"], params["step_factor"], params["check"])
        sizes = parse_sizes(text)
        assert sizes
        if params.get("dtype"):
            for d in params["dtype"].split(","):
                round_to_itemsize(sizes, itemsize_of(d), d)
    for key in ("chunk", "staging_chunk", "latency_size", "bandwidth_size"):
        if key in params:
            parse_size(params[key])
    if params.get("delay"):
        from commbench.analysis.stragglers import parse_delay
        parse_delay(params["delay"], params["timeout_s"])
    if "dtype" in params:
        dtype_of(params["dtype"])
    if "redop" in params:
        redop_code(params["redop"])
    if params.get("impl_text") and params["device"] != "auto":
        parse_impls(params["impl_text"], collectives.get(name), params["device"])
    return params


def gpu_check_argvs(gpus: int, quick: bool = False) -> list:
    return [s.arguments(gpus, quick) for s in GPU_NODE.steps_for(gpus)]


ARGVS = [list(a) for a in dict.fromkeys(map(tuple, GPU_TEST_ARGS + [a for n in (1, 2, 8) for q in (False, True)
                                                                     for a in gpu_check_argvs(n, q)]))]


@pytest.mark.parametrize("argv", ARGVS, ids=" ".join)
def test_gpu_argument_lists_parse(argv):
    parse(argv)


def test_gpu_check_runs_every_command_and_the_multi_gpu_ones_on_several_gpus():
    one, eight = gpu_check_argvs(1), gpu_check_argvs(8)
    shared = [s.arguments(1) for s in GPU_NODE.steps_for(1) if s.env]
    assert {a[0] for a in one} == {"version", "topo", "doctor", "p2p", "copy", "links", *collectives.names()}
    # One GPU: the multi-rank NCCL path on 2 and 3 ranks sharing it (COMMBENCH_SHARED_GPU).
    assert [(a[0], a[a.index("--np") + 1]) for a in shared] == [("allreduce", "2"), ("alltoall", "2"),
                                                                  ("allreduce", "3"), ("alltoall", "3"), ("links", "3")]
    single = [a for a in one if a not in shared]
    extra = [a for a in eight if a not in single]
    assert all(a in eight for a in single) and not any(a in eight for a in shared)
    # NCCL between ranks: p2p, links over every GPU, and a delayed rank (stragglers).
    assert [a[:3] for a in extra] == [["p2p", "--impl", "nccl"], ["links", "--impl", "nccl"],
                                      ["allreduce", "--device", "cuda"]]
    assert extra[1][extra[1].index("--np") + 1] == "8" and "--delay" in extra[2]


@pytest.mark.parametrize("argv,wrong", [
    (["allreduce", "--sizes", "4,1000,1M,3M:+1M"], "bad size"),  # a list item that is half a range
    (["allreduce", "--device", "gpu"], "is not one of"),
    (["allreduce", "--device", "cuda", "--impl", "gloo"], "runs with --device cpu"),
    (["copy", "--staging-chunk", "4Q"], "bad size"),
    (["p2p", "--device", "cuda", "--access", "pull"], "is not one of"),
    (["allreduce", "--dtype", "float8"], "unknown dtype"),
])
def test_a_bad_list_is_caught(argv, wrong):
    with pytest.raises(Exception, match=wrong):
        parse(argv)
