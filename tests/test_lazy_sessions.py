"""export.runtime.onnx.LazySessions: each onnxruntime session made on first use, once."""

import threading
import time

import pytest

from export.runtime.onnx import LazySessions


def _counting_maker(calls: list, value, delay: float = 0.0):
    def maker():
        calls.append(value)
        time.sleep(delay)
        return value
    return maker


def test_roles_are_listed_before_they_are_made_and_made_once():
    calls: list = []
    sessions = LazySessions()
    sessions.add("encoder", _counting_maker(calls, "E"))
    sessions.add("decoder_step", _counting_maker(calls, "D"))
    sessions["search"] = "S"
    assert "encoder" in sessions and "search" in sessions and "attention" not in sessions
    assert sorted(sessions) == ["decoder_step", "encoder", "search"] and len(sessions) == 3
    assert calls == [] and sessions.made() == ["search"]
    assert sessions["encoder"] == "E" and sessions["encoder"] == "E"
    assert calls == ["E"] and sessions.made() == ["encoder", "search"]
    with pytest.raises(KeyError):
        sessions["attention"]


def test_a_session_set_in_place_of_a_maker_replaces_it_unmade():
    calls: list = []
    sessions = LazySessions()
    sessions.add("decoder_step", _counting_maker(calls, "float32"))
    for role in list(sessions):  # as bench.precision swaps in float16 sessions
        sessions[role] = "float16"
    assert sessions["decoder_step"] == "float16" and calls == []
    del sessions["decoder_step"]
    assert "decoder_step" not in sessions and len(sessions) == 0


def test_threads_asking_at_once_make_one_session():
    calls: list = []
    sessions = LazySessions()
    sessions.add("decoder_step", _counting_maker(calls, "D", delay=0.05))
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(sessions["decoder_step"]))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == ["D"] * 8 and calls == ["D"]


def test_a_failing_maker_leaves_the_role_to_try_again():
    attempts: list = []

    def maker():
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("not loadable")
        return "D"

    sessions = LazySessions()
    sessions.add("decoder_step", maker)
    with pytest.raises(RuntimeError):
        sessions["decoder_step"]
    assert "decoder_step" in sessions and sessions.made() == []
    assert sessions["decoder_step"] == "D" and len(attempts) == 2
