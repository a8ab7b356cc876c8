"""``benchmarks/threads_chain.py`` reads each thread's CPU time and context switches from
``/proc``: checked against this process, whose threads are known, so a change in what the
kernel writes there (or in the parsing) says so in the suite, not at the next
measurement."""

from __future__ import annotations

import os
import shutil
import threading
import time

import pytest
import threads_chain
from threads_chain import stat_counts, threads_of, window


def _spin(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(range(1000))
        time.sleep(0)  # (lets the reading thread have the GIL)


def test_every_thread_of_a_process_is_read_with_its_name_and_counts() -> None:
    done = threading.Event()
    helper = threading.Thread(target=done.wait, name="tc-helper")
    helper.start()
    try:
        threads = threads_of(os.getpid())
        assert threading.get_native_id() in threads
        assert helper.native_id in threads
        assert threads[helper.native_id][0]  # (the kernel's name: Python's from 3.14)
        assert all(cpu >= 0 and vol >= 0 and inv >= 0 for _, cpu, vol, inv in threads.values())
    finally:
        done.set()
        helper.join()


def test_a_window_counts_a_spinning_thread_and_a_waiting_one() -> None:
    stop = threading.Event()
    waiter = threading.Thread(target=lambda: [stop.wait(0.001) for _ in range(100_000)])
    spinner = threading.Thread(target=_spin, args=(stop,))
    waiter.start()
    spinner.start()
    try:
        got = window({"me": os.getpid()}, 0.3)["me"]
    finally:
        stop.set()
        spinner.join()
        waiter.join()
    assert spinner.native_id in got and waiter.native_id in got
    assert got[spinner.native_id][1] >= 0.02  # its CPU seconds (10 ms ticks; a shared machine)
    assert got[waiter.native_id][2] >= 20  # its voluntary switches: 1 ms waits


def test_perf_stat_output_is_read_per_event_and_uncounted_events_left_out() -> None:
    text = "\n".join(
        [
            "# started on Mon Nov 30 07:30:00 2026",
            "",
            "87410,,raw_syscalls:sys_enter,5001234567,100.00,,",
            "30012,,syscalls:sys_enter_poll,5001234567,100.00,,",
            "<not counted>,,syscalls:sys_enter_futex,0,100.00,,",
            "6800,,context-switches,5001234567,100.00,,",
        ]
    )
    assert stat_counts(text) == {"all": 87410, "poll": 30012, "context-switches": 6800}


def test_stat_unusable_says_perf_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert threads_chain.stat_unusable() == "perf not found (apt-get install linux-perf)"


def test_stat_unusable_tries_perf_stat_on_a_sleep_of_its_own() -> None:
    why = threads_chain.stat_unusable()
    if shutil.which("perf") is None:
        assert why == "perf not found (apt-get install linux-perf)"
    else:  # (a container may refuse perf_event_open even to root: said, not raised)
        assert why is None or why.startswith(f"perf stat failed (uid {os.geteuid()}): ")
