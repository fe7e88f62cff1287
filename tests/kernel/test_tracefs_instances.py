"""Instances of several processes at once: the stale-instance sweep removes only what crashed
sessions left, and never fails because another process made or removed an instance meanwhile."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import threading
from pathlib import Path

from openetw.kernel.tracefs import INSTANCE_PREFIX, TracefsInstance, remove_stale_instances


def orphan_instance(name: str, root: Path) -> TracefsInstance:
    """An instance as a crashed session leaves it: made while its owner lived, then the owner died
    (an owner dead from the start would let another process's sweep take it while it is made)."""
    owner = subprocess.Popen(["sleep", "60"])
    try:
        return TracefsInstance.create(name, root=root, buffer_size_kb=64, exclude_pids=[owner.pid])
    finally:
        owner.kill()
        owner.wait()


def test_an_instance_without_owner_yet_is_left_alone_until_the_grace_period_ends(tracefs_root):
    path = tracefs_root / "instances" / f"{INSTANCE_PREFIX}t_unowned_{os.getpid()}"
    path.mkdir()  # as a creator does, before it writes its owner
    try:
        assert path.name not in remove_stale_instances(tracefs_root)
        assert path.is_dir()
        assert path.name in remove_stale_instances(tracefs_root, grace_s=0.0)
        assert not path.exists()
    finally:
        if path.exists():
            path.rmdir()


def test_an_instance_whose_owner_is_alive_stays_and_one_whose_owner_died_goes(tracefs_root):
    live = TracefsInstance.create(f"t_owned_{os.getpid()}", root=tracefs_root, exclude_pids=[threading.get_native_id()])
    dead = orphan_instance(f"t_orphan_{os.getpid()}", tracefs_root)
    try:
        removed = remove_stale_instances(tracefs_root, grace_s=0.0)
        assert live.name not in removed and live.path.is_dir()
        assert not dead.path.exists()  # by this sweep, or by one of another test run that came first
    finally:
        live.remove()
        dead.remove()


def test_an_instance_removed_by_another_process_counts_as_removed(tracefs_root):
    instance = orphan_instance(f"t_gone_{os.getpid()}", tracefs_root)
    subprocess.run(["rmdir", str(instance.path)], check=False)  # (a sweep of another test run may come first)
    assert not instance.path.exists()
    instance.remove()  # no error: it is gone
    assert instance.name not in remove_stale_instances(tracefs_root, grace_s=0.0)


def _make_and_remove(root: str, tag: str, rounds: int, results: multiprocessing.Queue) -> None:
    """A session's life, many times: create with the reader as owner, check it is still there, remove."""
    lost = 0
    for index in range(rounds):
        instance = TracefsInstance.create(f"t_race_{tag}_{index}", root=Path(root), buffer_size_kb=64,
                                          exclude_pids=[threading.get_native_id()])  # fmt: skip
        instance.enable(["sched/sched_process_fork"])
        if not instance.path.is_dir():
            lost += 1
        instance.remove()
    results.put(("maker", lost))


def _sweep(root: str, until: multiprocessing.Event, results: multiprocessing.Queue) -> None:
    """Another session starting, again and again: it sweeps stale instances (with no grace for the ownerless)."""
    removed: list[str] = []
    errors: list[str] = []
    while not until.is_set():
        try:
            removed += remove_stale_instances(Path(root))
        except Exception as error:  # noqa: BLE001 - reported to the test
            errors.append(repr(error))
    results.put(("sweeper", removed, errors))


def test_two_processes_sweeping_while_a_third_makes_instances_fail_nothing(tracefs_root):
    orphans = [orphan_instance(f"t_race_orphan_{os.getpid()}_{i}", tracefs_root) for i in range(12)]
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    until = context.Event()
    sweepers = [context.Process(target=_sweep, args=(str(tracefs_root), until, results)) for _ in range(2)]
    maker = context.Process(target=_make_and_remove, args=(str(tracefs_root), str(os.getpid()), 40, results))
    try:
        for process in sweepers:
            process.start()
        maker.start()
        maker.join(timeout=120)
        until.set()
        for process in sweepers:
            process.join(timeout=60)
        outcome = [results.get(timeout=10) for _ in range(3)]
    finally:
        until.set()
        for process in (*sweepers, maker):
            if process.is_alive():
                process.kill()
        for orphan in orphans:
            orphan.remove()
    assert maker.exitcode == 0 and all(p.exitcode == 0 for p in sweepers)
    assert [o for o in outcome if o[0] == "maker"] == [("maker", 0)]
    sweeps = [o for o in outcome if o[0] == "sweeper"]
    assert [errors for _, _, errors in sweeps] == [[], []]
    removed = [name for _, names, _ in sweeps for name in names]
    assert not any(name.startswith(f"{INSTANCE_PREFIX}t_race_{os.getpid()}_") for name in removed)  # none of the maker's
    ours = [name for name in removed if name.startswith(f"{INSTANCE_PREFIX}t_race_orphan_{os.getpid()}_")]
    assert len(ours) == len(set(ours))  # each removed once (a sweep of another test run may take some)
    assert not any(orphan.path.exists() for orphan in orphans)
