"""localengine.pin_engine: every thread of the server's children on one core; the server keeps its own."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
from governor_dev.localengine import pin_engine

# A stand-in for the API server: it starts one child (the EngineCore's place) that runs a second thread.
TREE = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import threading, time; "
    "threading.Thread(target=time.sleep, args=(60,)).start(); time.sleep(60)'])\n"
    "time.sleep(60)\n"
)


def test_pin_engine_pins_every_thread_of_the_children_and_leaves_the_server_alone() -> None:
    cpu = sorted(os.sched_getaffinity(0))[-1]
    server = subprocess.Popen([sys.executable, "-c", TREE])
    try:
        parent = psutil.Process(server.pid)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            children = parent.children(recursive=True)
            if children and children[0].num_threads() >= 2:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the stand-in tree did not start")
        before = os.sched_getaffinity(server.pid)

        assert pin_engine(server.pid, cpu) >= 2

        threads = [t.id for child in parent.children(recursive=True) for t in child.threads()]
        assert threads and all(os.sched_getaffinity(tid) == {cpu} for tid in threads)
        assert os.sched_getaffinity(server.pid) == before
    finally:
        for child in psutil.Process(server.pid).children(recursive=True):
            child.kill()
        server.kill()
        server.wait()


def test_pin_engine_on_a_server_that_is_gone_pins_nothing() -> None:
    server = subprocess.Popen([sys.executable, "-c", "pass"])
    server.wait()
    assert pin_engine(server.pid, sorted(os.sched_getaffinity(0))[-1]) == 0
