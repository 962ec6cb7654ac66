"""The events the ranks of commbench's own launch tell the command (commbench/launch/events.py)."""

import os

from commbench.launch import events


def test_what_the_ranks_tell_is_read_back_whole(tmp_path, monkeypatch):
    path = tmp_path / events.EVENTS_NAME
    monkeypatch.setenv(events.EVENTS_VAR, str(path))
    # A result file's name may hold bytes that are no UTF-8 (Python's surrogates): it comes back whole.
    name = os.fsdecode(b"run-\xff.json")
    assert events.tell(events.GUARDED)
    events.rank_started(0)
    events.rank_started(1)  # only rank 0 says it runs
    events.announce_result(name)
    events.speak_for_rank_0("peer-lost", "at ring 1K: rank 0 did not arrive: its process ended")
    with open(path, "a") as f:
        f.write('{"event": "status", "sta')  # a rank killed as it wrote: passed over
    told = events.read(str(path))
    assert told.started and told.guarded == {os.getpid()} and told.status is None
    assert told.result == name and told.result_path == os.path.abspath(name)
    assert os.fsencode(told.result) == b"run-\xff.json"
    assert told.spoken == ("peer-lost", "at ring 1K: rank 0 did not arrive: its process ended")
    assert told.launched_status(0) == 0 and told.launched_status(1) == 1


def test_rank_0_hands_a_run_s_status_to_the_command_and_every_rank_exits_0(tmp_path, monkeypatch):
    path = tmp_path / events.EVENTS_NAME
    assert events.rank_status(0, 1) == 1  # no launch of commbench's own: the status is the rank's
    monkeypatch.setenv(events.EVENTS_VAR, str(path))
    assert events.rank_status(1, 1) == 0 and events.rank_status(0, 0) == 0 and not path.exists()
    assert events.rank_status(0, 1) == 0
    told = events.read(str(path))
    assert told.status == 1 and told.launched_status(0) == 1 and told.launched_status(137) == 137
    # A folder that takes no file: the status goes the launch's way.
    monkeypatch.setenv(events.EVENTS_VAR, str(tmp_path / "gone" / events.EVENTS_NAME))
    assert events.rank_status(0, 1) == 1


def test_a_process_of_no_launch_tells_nothing(monkeypatch):
    monkeypatch.delenv(events.EVENTS_VAR, raising=False)
    assert not events.tell(events.STARTED)
    assert events.read("/nonexistent/events.jsonl") == events.Told()
