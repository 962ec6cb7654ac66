"""How a standalone launch ends (commbench/launch/ending.py): a case for each rule of the ordered table,
its line and what becomes of the result file; every rule has a case, and docs/launching.md lists the
rules in the code's order."""

import json
import os
import re
import signal

import pytest

from commbench.launch import ending
from commbench.launch.ending import Ending
from docs import result_doc

ENDED = dict(status=1, ending=None, stopped=None, interrupted=None, started=True, ran=True, spoken=None,
             signalled=None, result=None)
KILLED = (1, "vm", signal.SIGKILL)
CAUSE = "rank 1's process ended on signal SIGKILL on host vm (mpirun's account), and the launch ended the others"
RANK_0 = "rank 0's process was killed, or ended by the launch for another rank's"

# rule: (the ending, the result file's status beforehand (None: no file), the line ({out}: the file),
# the file's status afterwards, its error afterwards)
CASES = {
    "success": (dict(status=0), "running", None, "running", None),
    "ranks-said-it": (dict(ending=b"commbench: error at ring 1K: wrong elements"), "failed", None, "failed", "boom"),
    "backstop-stopped": (dict(stopped="rank 2 was stopped before its watchdog ran: ended"), "running",
                         "commbench: error: rank 2 was stopped before its watchdog ran: ended (measured rows kept in "
                         "{out})", "timeout", "rank 2 was stopped before its watchdog ran: ended"),
    "rank-1-spoke": (dict(spoken=("peer-lost", "at ring 1K: rank 0 did not arrive: its process ended")), "running",
                     "commbench: error on rank 1: at ring 1K: rank 0 did not arrive: its process ended", "peer-lost",
                     "at ring 1K: rank 0 did not arrive: its process ended"),
    "left-open": (dict(), "running", f"commbench: error: the ranks ended with {{out}} still open: {RANK_0} (measured rows "
                                     "kept)", "peer-lost",
                  f"the ranks ended (status 1) with this file still open: {RANK_0}; the rows measured before are kept"),
    "ended-before-the-file": (dict(signalled=KILLED), None,
                              f"commbench: error: the ranks ended before any result was written: {CAUSE}", None, None),
    "closed-ahead": (dict(), "failed", "commbench: error: boom (measured rows kept in {out})", "failed", "boom"),
    "complete-then-signalled": (dict(signalled=KILLED), "complete",
                                f"commbench: error: the run was complete ({{out}} holds all of it), but then {CAUSE}",
                                "complete", None),
    "complete-then-mpirun-failed": (dict(mpirun_status=-signal.SIGKILL), "complete",
                                    "commbench: error: the run was complete ({out} holds all of it), but then mpirun "
                                    "ended on signal SIGKILL, no rank's failure", "complete", None),
    "killed-in-start-up": (dict(started=False), None,
                           "commbench: error: the ranks ended before any result was written (launch status 1): a "
                           "rank's process ended as the ranks started, and mpirun gave no account of which", None, None),
    "mpirun-failed-before-any-rank": (dict(started=False, ran=False, ending=b"commbench: error on rank 2: x"), None,
                                      "commbench: error: the launch ended with status 1 before any rank ran (mpirun's "
                                      "account above)", None, None),
    "nothing-to-add": (dict(ending=b"commbench: error on rank 2: x"), None, None, None, None),
}


def test_every_rule_has_a_case_and_the_docs_list_them_in_order():
    names = [r.name for r in ending.RULES]
    assert list(CASES) == names and len(set(names)) == len(names)
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "launching.md")) as f:
        text = f.read()
    table = text[text.index("### How a standalone launch ends"):]
    assert re.findall(r"^\| `([a-z0-9-]+)` \|", table, re.M) == names


@pytest.mark.parametrize("rule", list(CASES))
def test_each_rule_says_its_line_and_closes_the_file_as_it_names(rule, tmp_path):
    how, before, line, after, error = CASES[rule]
    out = str(tmp_path / "r.json")
    if before is not None:
        with open(out, "w") as f:
            json.dump({**result_doc([], status=before), "error": "boom" if before == "failed" else None}, f)
    e = Ending(**{**ENDED, **how, "result": out if before is not None else None})
    chosen, said = ending.decide(e, e.result)
    assert chosen.name == rule
    assert said == (None if line is None else line.format(out=out))
    if before is None:
        assert not os.path.exists(out)
    else:
        with open(out) as f:
            doc = json.load(f)
        assert (doc["status"], doc["error"]) == (after, error)


def test_a_file_the_command_cannot_close_falls_to_the_next_rule(tmp_path, monkeypatch):
    """left-open holds only where the close took: a file that cannot be rewritten (a full disk) is
    judged by the rules below it, and stays as it was."""
    from commbench.results import document

    def full(path, text):
        raise OSError(28, "No space left on device", path)
    monkeypatch.setattr(document, "replace_whole", full)
    out = tmp_path / "r.json"
    out.write_text(json.dumps(result_doc([], status="running")))
    chosen, said = ending.decide(Ending(**{**ENDED, "result": str(out)}), str(out))
    assert (chosen.name, said) == ("nothing-to-add", None)
    assert json.loads(out.read_text())["status"] == "running"


def test_the_held_back_line_is_said_where_no_rule_says_one_and_mpiruns_account_before_a_line_naming_it():
    held = Ending(**{**ENDED, "ending": b"commbench: terminated", "interrupted": None})
    assert ending.said(held) == (None, "commbench: terminated")
    account = "prterun noticed that process rank 1 ... exited on signal 9\n"
    named = Ending(**{**ENDED, "signalled": KILLED, "withheld_account": account})
    assert ending.said(named) == (account, f"commbench: error: the ranks ended before any result was written: {CAUSE}")
    plain = Ending(**{**ENDED, "started": False, "ran": False, "withheld_account": account})
    assert ending.said(plain)[0] is None  # a line that names no rank from mpirun's notice
