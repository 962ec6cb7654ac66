"""Slurm's topology.conf and hostlist expressions (commbench/analysis/topology.py): the expansions,
a two-level tree read exactly, the hosts check, and every fault as one CommbenchError naming the file
and, where a line is at fault, the line."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.analysis.topology import MAX_HOSTS, Topology, expand_hostlist, load_topology
from commbench.errors import CommbenchError

TWO_LEVEL = """\
# Two leaves under one spine.
SwitchName=leaf1 Nodes=node[001-004]
SwitchName=leaf2 Nodes=node[005-008]
SwitchName=spine1 Switches=leaf[1-2]
"""


def write(tmp_path, text, name="topology.conf"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# ---- hostlists ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("expr, names", [
    ("node[001-032]", [f"node{i:03d}" for i in range(1, 33)]),
    ("node[1-3,7]", ["node1", "node2", "node3", "node7"]),
    ("a,b,c", ["a", "b", "c"]),
    ("rack[1-2]-gpu[01-02]", ["rack1-gpu01", "rack1-gpu02", "rack2-gpu01", "rack2-gpu02"]),
    ("x[8-12]", ["x8", "x9", "x10", "x11", "x12"]),
    ("x[08-10]", ["x08", "x09", "x10"]),
    ("a,n[1-2]-ib,b", ["a", "n1-ib", "n2-ib", "b"]),
    ("n[07]", ["n07"]),
    ("[1-2]", ["1", "2"]),
    ("single", ["single"]),
])
def test_hostlists_expand_as_slurm_does(expr, names):
    assert expand_hostlist(expr) == names


@pytest.mark.parametrize("expr, words", [
    ("node[1-3", "unbalanced '['"),
    ("node1-3]", "unbalanced ']'"),
    ("node[1-[2-3]]", "nested brackets"),
    ("node[5-3]", "ends below its start"),
    ("a,,b", "empty item"),
    (",a", "empty item"),
    ("a,", "empty item"),
    ("node[]", "empty item"),
    ("node[1,,2]", "empty item"),
    ("", "empty"),
    ("node[a-3]", "not a number"),
    ("node[1-x]", "not a number"),
    ("node[1-2-3]", "not a number"),
    ("node[-3]", "not a number"),
    ("node[0-1000000]", "more than 1,000,000 names"),
    ("a[0-999]-b[0-999]-c[0-9]", "more than 1,000,000 names"),
    ("n[0-99999999999999999999]", "more than 1,000,000 names"),
])
def test_a_bad_hostlist_is_one_error_naming_it(expr, words):
    with pytest.raises(CommbenchError) as err:
        expand_hostlist(expr)
    message = str(err.value)
    assert message.startswith(f"hostlist {expr!r}: ") and words in message and "\n" not in message


def test_a_number_past_ints_digits_is_refused_in_a_short_line():
    expr = "n[1-" + "9" * 4400 + "]"
    with pytest.raises(CommbenchError) as err:
        expand_hostlist(expr)
    assert str(err.value) == f"hostlist {expr[:57] + '...'!r}: a number of more than 64 digits names no host"


def test_the_bound_admits_exactly_a_million():
    assert len(expand_hostlist(f"n[1-{MAX_HOSTS}]")) == MAX_HOSTS == 1_000_000


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(prefix=st.text(alphabet="abcxyz-_.", max_size=6), a=st.integers(0, 5000), span=st.integers(0, 300),
       width=st.integers(1, 6))
def test_a_range_expands_to_its_count_of_distinct_padded_names(prefix, a, span, width):
    b = a + span
    low = str(a).zfill(width)
    names = expand_hostlist(f"{prefix}[{low}-{b}]")
    assert len(names) == b - a + 1 == len(set(names))
    assert names[0] == prefix + low
    for n, name in zip(range(a, b + 1), names):
        digits = name[len(prefix):]
        assert name.startswith(prefix) and int(digits) == n
        assert len(digits) == max(len(low), len(str(n)))


# ---- reading the file ---------------------------------------------------------------------------------

def test_a_two_level_file_is_read_exactly(tmp_path):
    path = write(tmp_path, TWO_LEVEL)
    topo = load_topology(path)
    assert topo.leaves == {"leaf1": ("node001", "node002", "node003", "node004"),
                           "leaf2": ("node005", "node006", "node007", "node008")}
    assert topo.parents == {"leaf1": "spine1", "leaf2": "spine1"}
    assert topo.source == path
    assert topo.leaf_of == {**{f"node{i:03d}": "leaf1" for i in range(1, 5)}, **{f"node{i:03d}": "leaf2" for i in range(5, 9)}}
    with pytest.raises(AttributeError):
        topo.source = "elsewhere"  # frozen


def test_keys_are_case_insensitive_and_comments_continuations_and_link_speed_are_understood(tmp_path):
    path = write(tmp_path, "\n".join([
        "  # a comment line",
        "",
        "switchname=s0 NODES=h[1-2] linkspeed=100   # trailing comment",
        "SwitchName=s1 \\",
        "   Nodes=h[3-4] \\  # a comment before the continuation is gone first",
        "   LinkSpeed=200",
        "SWITCHES=s[0-1] SwitchName=top",
        "",
    ]))
    topo = load_topology(path)
    assert topo.leaves == {"s0": ("h1", "h2"), "s1": ("h3", "h4")}
    assert topo.parents == {"s0": "top", "s1": "top"}
    assert topo.leaf_of["h4"] == "s1"


def test_a_switch_may_be_named_before_it_is_defined_and_a_tree_has_three_levels(tmp_path):
    path = write(tmp_path, "SwitchName=core Switches=spine[1-2]\nSwitchName=spine1 Switches=l1\nSwitchName=spine2 Switches=l2\n"
                           "SwitchName=l1 Nodes=a,b\nSwitchName=l2 Nodes=c\n")
    topo = load_topology(path)
    assert topo.parents == {"spine1": "core", "spine2": "core", "l1": "spine1", "l2": "spine2"}
    assert topo.leaves == {"l1": ("a", "b"), "l2": ("c",)}


# ---- the hosts check ----------------------------------------------------------------------------------

def test_check_hosts_passes_when_every_host_is_under_a_leaf(tmp_path):
    topo = load_topology(write(tmp_path, TWO_LEVEL))
    assert topo.check_hosts(["node001", "node008", "node001"]) is None
    assert topo.check_hosts([]) is None


def test_check_hosts_lists_five_unknown_hosts_and_counts_the_rest(tmp_path):
    path = write(tmp_path, TWO_LEVEL)
    topo = load_topology(path)
    hosts = ["node001"] + [f"node{i:04d}" for i in range(5, 13)]
    with pytest.raises(CommbenchError) as err:
        topo.check_hosts(hosts)
    assert str(err.value) == (f"the hosts do not match the topology {path}: node0005, node0006, node0007, node0008, node0009 "
                              "(and 3 more) are under no leaf switch")


def test_check_hosts_names_a_single_unknown_host(tmp_path):
    path = write(tmp_path, TWO_LEVEL)
    with pytest.raises(CommbenchError) as err:
        load_topology(path).check_hosts(["node001", "node0005", "node0005"])
    assert str(err.value) == f"the hosts do not match the topology {path}: node0005 is under no leaf switch"


def test_from_leaves_builds_a_topology_in_code():
    topo = Topology.from_leaves({"l0": ["h0", "h1"], "l1": ["h2"]})
    assert topo.leaves == {"l0": ("h0", "h1"), "l1": ("h2",)}
    assert topo.parents == {} and topo.source == "(model)"
    assert topo.leaf_of == {"h0": "l0", "h1": "l0", "h2": "l1"}
    with pytest.raises(CommbenchError, match=r"^the hosts do not match the topology \(model\): h3 is under no leaf switch$"):
        topo.check_hosts(["h0", "h3"])
    assert Topology.from_leaves({"x": ["a"]}, source="sim").source == "sim"


@pytest.mark.parametrize("leaves, words", [
    ({}, "no leaf switch"),
    ({"l0": ["a"], "l1": ["b", "a"]}, "host a is under two leaf switches: l0 and l1"),
])
def test_from_leaves_refuses_what_a_file_would_be_refused_for(leaves, words):
    with pytest.raises(CommbenchError, match=words):
        Topology.from_leaves(leaves)


# ---- faults -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, line, words", [
    ("SwitchName=l1 Nodes=a\nNodes=b LinkSpeed=1\n", 2, ["without SwitchName"]),
    ("SwitchName=l1 Nodes=a Speed=10\n", 1, ["unknown key", "'Speed'"]),
    ("SwitchName=l1 Nodes=a\nSwitchName=l2 Nodes\n", 2, ["'Nodes' is not a name=value setting"]),
    ("SwitchName=l1 Nodes=\n", 1, ["'Nodes=' is not a name=value setting"]),
    ("SwitchName=l1 Nodes=a\nSwitchName=l2 Nodes=b\x00c\n", 2, ["a control character (U+0000) at column 22"]),
    ("SwitchName=l1 Nodes=a\tb\x7f\n", 1, ["a control character (U+007F) at column 24"]),
    ("SwitchName=l1 Nodes=a\n\nSwitchName=l1 Nodes=b\n", 3, ["switch l1 is defined twice", "first at line 1"]),
    ("SwitchName=l1 Nodes=n[1-4]\nSwitchName=l2 Nodes=n[4-6]\n", 2, ["host n4 is under two leaf switches", "l1 (line 1) and l2"]),
    ("SwitchName=l1 Nodes=a\nSwitchName=top Switches=l[1-2]\n", 2, ["names l2", "which no SwitchName= line defines"]),
    ("SwitchName=l1 Nodes=a\nSwitchName=s1 Switches=l1\nSwitchName=s2 Switches=l1\n", 3,
     ["switch l1 is under two parents", "s1 (line 2) and s2"]),
    ("SwitchName=l1 Nodes=a\nSwitchName=s1 Switches=s2\nSwitchName=s2 Switches=s1\n", 2,
     ["cycle", "s1 contains s2 contains s1"]),
    ("SwitchName=a Switches=c Nodes=x\nSwitchName=b Switches=a\nSwitchName=c Switches=b\n", 1,
     ["cycle", "a contains c contains b contains a"]),
    ("SwitchName=me Switches=me Nodes=x\n", 1, ["cycle", "me contains me"]),
    ("SwitchName=l1 Nodes=node[1-\n", 1, ["Nodes=", "unbalanced '['"]),
    ("SwitchName=l1 Nodes=node[3-1]\n", 1, ["Nodes=", "ends below its start"]),
    ("SwitchName=l1 Nodes=a\nSwitchName=top Switches=l1,,l2\n", 2, ["Switches=", "empty item"]),
    ("SwitchName=l1 Nodes=n[0-1000000]\n", 1, ["more than 1,000,000 names"]),
    ("SwitchName=l1\n", 1, ["neither Nodes= nor Switches="]),
    ("SwitchName=l1 Nodes=a Nodes=b\n", 1, ["given twice"]),
    ("SwitchName=l[1-2] Nodes=a\n", 1, ["more than one switch"]),
    ("SwitchName=l1 Nodes=a LinkSpeed=fast\n", 1, ["LinkSpeed=fast", "whole number"]),
    ("SwitchName=l1 Nodes=a\n# fine so far\nSwitchName=l2 \\\n  Nodes=b \\\n  Colour=red\n", 3, ["unknown key", "'Colour'"]),
])
def test_a_faulty_line_is_one_error_naming_file_and_line(tmp_path, text, line, words):
    path = write(tmp_path, text)
    with pytest.raises(CommbenchError) as err:
        load_topology(path)
    message = str(err.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert "\n" not in message
    for word in words:
        assert word in message


@pytest.mark.parametrize("text", ["", "\n\n# only comments\n   \n", "  \\\n\n"])
def test_a_file_without_a_leaf_is_refused(tmp_path, text):
    """Only an empty file can have no leaf: every switch needs Nodes= or Switches=, and a finite tree
    of Switches= with no Nodes= anywhere is a cycle, refused as one (above)."""
    path = write(tmp_path, text)
    with pytest.raises(CommbenchError) as err:
        load_topology(path)
    assert str(err.value).startswith(f"{path}: no leaf switch")


def test_a_missing_or_unreadable_file_is_one_error_naming_it(tmp_path):
    missing = str(tmp_path / "nope.conf")
    with pytest.raises(CommbenchError) as err:
        load_topology(missing)
    assert str(err.value) == f"cannot read topology file {missing}: No such file or directory"
    with pytest.raises(CommbenchError, match=f"cannot read topology file {tmp_path}: it is a folder"):
        load_topology(str(tmp_path))
    binary = tmp_path / "binary.conf"
    binary.write_bytes(b"SwitchName=l1 Nodes=\xff\xfe\n")
    with pytest.raises(CommbenchError, match="not UTF-8"):
        load_topology(str(binary))
    if os.geteuid() != 0:  # root reads a file whatever its mode
        locked = write(tmp_path, TWO_LEVEL, "locked.conf")
        os.chmod(locked, 0)
        with pytest.raises(CommbenchError, match=r"cannot read topology file .*: Permission denied"):
            load_topology(locked)


def test_an_error_line_quotes_a_huge_expression_cut_short(tmp_path):
    """An expression of 1.2 million names made a 10 MB error line; it is quoted to 60 characters."""
    names = ",".join(f"n{i}" for i in range(1_200_000))
    path = write(tmp_path, f"SwitchName=l1 Nodes={names}\n")
    with pytest.raises(CommbenchError) as err:
        load_topology(path)
    assert str(err.value) == f"{path}:1: Nodes=: hostlist {names[:57] + '...'!r}: expands to more than 1,000,000 names"


def test_the_parsers_messages_are_not_taken_for_credentials(tmp_path):
    """Every error line is scrubbed of credentials; the parser's wording must not read as one."""
    from commbench.redact import scrub
    path = write(tmp_path, "SwitchName=l1 Nodes=\n")
    with pytest.raises(CommbenchError) as err:
        load_topology(path)
    assert scrub(str(err.value)) == str(err.value)


def test_what_is_read_is_bounded_whatever_the_file_is(tmp_path):
    """A device is refused past the size a topology file may be, a FIFO with no writer reads as empty
    (never waited for), and the names of all lines together are bounded as each hostlist is."""
    with pytest.raises(CommbenchError) as err:
        load_topology("/dev/zero")
    assert str(err.value) == "/dev/zero: larger than the 64 MiB a topology file may be (docs/results.md)"
    fifo = str(tmp_path / "fifo.conf")
    os.mkfifo(fifo)
    with pytest.raises(CommbenchError, match=f"^{fifo}: no leaf switch"):
        load_topology(fifo)
    many = write(tmp_path, "".join(f"SwitchName=l{i} Nodes=n{i}x[1-600000]\n" for i in range(3)), "many.conf")
    with pytest.raises(CommbenchError) as err:
        load_topology(many)
    assert str(err.value) == f"{many}:2: more than 1,000,000 host names in all"
