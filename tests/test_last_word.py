"""The command's last word: the standalone launch's (launch/ending.py's rules) where the ranks could
not say theirs, from how the launch ended (what mpirun said, launch/relay.py, and what the ranks left
in the launch's folder), and the command line's own where a signal meets its first statements."""

import io
import os
import signal
import time

import pytest

from commbench.launch import relay
from commbench.launch.ending import Ending, last_word
from commbench.launch.supervise import say

ENDED = dict(status=1, ending=None, stopped=None, interrupted=None, started=False, ran=False, spoken=None,
             signalled=None, result=None)


@pytest.mark.parametrize("how,line", [
    # rank 1 SIGKILLed in its start-up before mpirun knew it for one of the job's: no notice, and rank 0
    # not yet far enough to make its mark; the ranks ran all the same (3 runs in 66 said "before any
    # rank ran")
    (dict(ran=True), "the ranks ended before any result was written (launch status 1): a rank's process ended as the "
                     "ranks started, and mpirun gave no account of which"),
    (dict(ran=True, started=True), "the ranks ended before any result was written (launch status 1): a rank's "
                                   "process ended as the ranks started, and mpirun gave no account of which"),
    (dict(), "the launch ended with status 1 before any rank ran (mpirun's account above)"),
    (dict(ran=True, signalled=(1, "vm", signal.SIGKILL)),
     "the ranks ended before any result was written: rank 1's process ended on signal SIGKILL on host vm (mpirun's "
     "account), and the launch ended the others"),
    # a Ctrl-C passed on as SIGTERM to a rank still in the interpreter's start-up: mpirun's notice of
    # that SIGTERM is no rank's fault
    (dict(ran=True, interrupted=signal.SIGINT, signalled=(0, "vm", signal.SIGTERM)),
     "the ranks ended before any result was written: the command was interrupted (SIGINT)"),
    (dict(ran=True, interrupted=signal.SIGTERM, signalled=(0, "vm", signal.SIGKILL)),
     "the ranks ended before any result was written: the command was interrupted (SIGTERM)"),
    # a gloo rank that aborted as the SIGTERM passed on tore it down (scale, 1 run in 8 of a hang-up)
    (dict(ran=True, interrupted=signal.SIGTERM, signalled=(1, "vm", signal.SIGABRT)),
     "the ranks ended before any result was written: the command was interrupted (SIGTERM)"),
])
def test_the_line_names_how_the_ranks_ended(how, line):
    assert last_word(Ending(**{**ENDED, **how}), None) == f"commbench: error: {line}"


BOX = (b"-" * 74 + b"\nprterun noticed that process rank 1 with PID 30561 on node vm exited on\nsignal 9 (Killed).\n"
       + b"-" * 74 + b"\n")


def test_mpiruns_notice_after_rank_0s_held_line_is_shown_above_the_commands_line(capsys):
    """The line named rank 1 from mpirun's notice `(mpirun's account)`, but where the notice came
    after rank 0's held-back `commbench: terminated` the relay passed nothing on after it, and the
    account was nowhere to be seen (9 runs in 79). The command shows it above its line."""
    read_end, write_end = os.pipe()
    sink = io.BytesIO()
    relayed = relay.start(read_end, sink)
    os.write(write_end, b"rank 1 starts\ncommbench: terminated\n" + BOX)
    os.close(write_end)
    relayed.join(10)
    assert sink.getvalue() == b"rank 1 starts\n"
    assert relay.withheld_account(relayed.withheld) == BOX.decode()
    say(Ending(**{**ENDED, "ran": True, "ending": relayed.ending, "signalled": relay.signalled_rank(relayed.seen),
                                 "withheld_account": relay.withheld_account(relayed.withheld)}))
    assert capsys.readouterr().err == BOX.decode() + (
        "commbench: error: the ranks ended before any result was written: rank 1's process ended on signal SIGKILL on host "
        "vm (mpirun's account), and the launch ended the others\n")


def test_a_ranks_error_line_after_mpiruns_nul_byte_ends_the_run():
    """mpirun's forwarding put a NUL byte before rank 0's error line: the relay took it for no ending,
    and the command said the error again in a line of its own (a failed kernel launch on emulated GPUs,
    in a loaded first run of the suite). A terminal shows no NUL: the line ends the run, and goes on
    without it (a log's reader, and test_hardening's credential test once, saw the line start with a
    NUL)."""
    read_end, write_end = os.pipe()
    sink = io.BytesIO()
    relayed = relay.start(read_end, sink)
    line = b"commbench: error at ring@nccl 1K: RuntimeError: reduce kernel launch failed"
    os.write(write_end, b"\0" + line + b"\r\n" + BOX)
    os.close(write_end)
    relayed.join(10)
    assert relayed.ending == line and relay.by_rank_0(relayed.ending)
    assert sink.getvalue() == line + b"\r\n"


@pytest.mark.parametrize("relayer", ["start", "pass_on"])
def test_a_librarys_message_is_relayed_without_its_credential(relayer):
    """What the ranks and mpirun say passes through scrubbed (UCX and Open MPI quote the settings they
    were given), a line at a time: a line that comes in pieces, a credential split between them, is
    held until it ends; a progress bar's redraws (carriage returns) pass on as they end, what is left
    at the end of the stream too."""
    read_end, write_end = os.pipe()
    sink = io.BytesIO()
    relayed = getattr(relay, relayer)(read_end, sink)
    token = b"AKIA" + b"ABCDEFGHIJ234567"
    for piece in (b"UCX  WARN  UCX_NET_DEVICES=mlx5_0:1,", token[:9], token[9:] + b" unknown\n",
                  b"\r[##   ] 40%", b"\r[#####] 100%", b" btl_tcp_if_include=", token):
        os.write(write_end, piece)
        time.sleep(0.02)  # each its own read
    os.close(write_end)
    relayed.join(10)
    assert sink.getvalue() == (b"UCX  WARN  UCX_NET_DEVICES=mlx5_0:1,<redacted> unknown\n\r[##   ] 40%\r[#####] 100% "
                               b"btl_tcp_if_include=<redacted>")


def test_a_ctrl_c_before_click_runs_is_the_aborted_line(monkeypatch, capfd):
    """A Ctrl-C in the command line's first statements, after its imports and before click turns one
    into its Abort, escaped as a KeyboardInterrupt traceback (1 run in 15 of a Ctrl-C 0.33 s in)."""
    import commbench.__main__ as entry
    import commbench.cli
    import commbench.launch.watchdog

    def interrupted():
        raise KeyboardInterrupt
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # this process's own handlers stay
    monkeypatch.setattr(commbench.launch.watchdog, "guard_start_up", lambda early=(): None)
    monkeypatch.setattr(commbench.cli, "main", interrupted)
    with pytest.raises(SystemExit) as ended:
        entry.main()
    assert ended.value.code == 130 and capfd.readouterr().err == "commbench: aborted\n"


def test_a_sigterm_before_click_runs_is_the_terminated_line(monkeypatch, capsys):
    """A SIGTERM in the command line's first statements, its handler set but before its `try`, escaped
    as a traceback of the Terminated it raised (2 runs in 2 with the signal sent there)."""
    import commbench.cli
    import commbench.launch.relay
    import commbench.launch.watchdog
    import commbench.trace
    monkeypatch.setattr(commbench.launch.watchdog, "guard_start_up", lambda early=(): None)
    monkeypatch.setattr(commbench.launch.relay, "std_streams", lambda out, err: (out, err))
    monkeypatch.setattr(commbench.trace, "launched", lambda: os.kill(os.getpid(), signal.SIGTERM))
    monkeypatch.setattr("sys.argv", ["commbench", "version"])
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with pytest.raises(SystemExit) as ended:
            commbench.cli.main()
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    assert ended.value.code == 143 and capsys.readouterr().err == "commbench: terminated\n"


@pytest.mark.parametrize("ending", [b"commbench: terminated", b"commbench: aborted"])
@pytest.mark.parametrize("status", ["running", "complete"])
def test_the_commands_signal_that_rank_0_met_after_its_watchdog_is_told(tmp_path, ending, status):
    """The command's signal, passed on, reached rank 0 once its watchdog had stopped (the last size
    measured): rank 0 ended on its own held-back line, which the command took for a closing word,
    the file left `running` (links, 3 runs in 10 of a SIGTERM 3-5 ms after its last row). The
    command closes it, or says that it was whole."""
    from commbench.results.document import ResultFile, load_document
    from docs import result_doc, row
    out = str(tmp_path / "run.json")
    doc = result_doc([], status="running")
    file = ResultFile(out, {k: v for k, v in doc.items() if k not in ("status", "error", "results")})
    file.add(row(1024, 10.0))
    if status == "complete":
        file.finish()
    line = last_word(Ending(**{**ENDED, "ran": True, "started": True, "interrupted": signal.SIGTERM,
                                  "ending": ending, "result": out}), out)
    if status == "running":
        assert line == (f"commbench: error: the ranks ended with {out} still open: the command was interrupted "
                        "(SIGTERM) (measured rows kept)")
        assert load_document(out)["status"] == "interrupted"
    else:
        assert line == (f"commbench: error: the run was complete ({out} holds all of it), but then the command was "
                        "interrupted (SIGTERM)")
        assert load_document(out)["status"] == "complete"


def test_mpiruns_own_failure_after_a_complete_run_is_told(tmp_path):
    """mpirun itself sent SIGTERM or SIGINT as the run ended: the ranks ended as they should, rank 0
    closed its file whole, and the command exited 1 without a word (9 runs in 16 of a signal to
    mpirun mid-run, which it passes on one to two seconds later)."""
    from commbench.results.document import ResultFile
    from docs import result_doc, row
    out = str(tmp_path / "run.json")
    doc = result_doc([], status="running")
    file = ResultFile(out, {k: v for k, v in doc.items() if k not in ("status", "error", "results")})
    file.add(row(1024, 10.0))
    file.finish()
    launched = Ending(**{**ENDED, "ran": True, "started": True, "result": out, "mpirun_status": 1})
    assert last_word(launched, out) == (f"commbench: error: the run was complete ({out} holds all of it), but then "
                                         "mpirun ended with status 1, no rank's failure")
    # SIGKILLed (probe: `mpirun ended with status -9`): the signal by its name.
    launched = Ending(**{**ENDED, "ran": True, "started": True, "result": out, "mpirun_status": -signal.SIGKILL})
    assert last_word(launched, out) == (f"commbench: error: the run was complete ({out} holds all of it), but then "
                                         "mpirun ended on signal SIGKILL, no rank's failure")
    # A run that found what it looked for (a wrong element): the command's status 1 is rank 0's, mpirun's is 0.
    assert last_word(Ending(**{**ENDED, "ran": True, "started": True, "result": out}), out) is None

