"""The export's state is committed incrementally: each commit appends what it changed to
a journal (`pending-<g>.jsonl`) that the manifest names up to its committed length, and
the state is written whole only when the journal has grown. What a crash leaves past the
committed length is not committed; a journal changed within it is refused in one line.

The state here is a real certificate, joiner and re-delivery marks, committed as the
export's sink commits them (`DatasetSink._commit`'s store call); tests on the stack are in
test_export_journal_stack.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rlmesh_stream.consumers.datasets import state
from rlmesh_stream.consumers.datasets.certificate import Certificate
from rlmesh_stream.consumers.datasets.episodes import Filters, Joiner
from rlmesh_stream.consumers.datasets.manifest import DatasetError, ManifestStore
from rlmesh_stream.consumers.runtime.redelivery import Seen
from rlmesh_stream.infra.cli import main

PRODUCERS = 1000


class _Export:
    """An export's state (joiner, certificate, re-delivery marks) and its commits."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = ManifestStore(root, fmt="parquet", dataset_id="rlmesh/j-v0")
        committed = state.replay(*self.store.read_state(), "test")
        self.joiner = Joiner(Filters())
        self.certificate = Certificate()
        self.seen: dict[str, Any] = {}
        if committed is not None:
            restored = state.load(committed, "test")
            self.certificate = restored.pop("certificate")
            self.joiner.restore(restored, {})
            self.seen = dict(committed["seen"])
        self.changes = state.Changes(committed)
        self.marks = {k: Seen.from_json(v) for k, v in self.seen.items()}

    def records(self, producers: range, seq: int) -> None:
        """One record of each of `producers` (sequence `seq`), in partition 0 of topic t."""
        mark = self.marks.setdefault("t|0", Seen())
        for n in producers:
            self.certificate.saw(f"producer-{n}", seq, dead_letter=False)
            mark.duplicate(max(mark.until, 0), (f"producer-{n}", seq))
        self.certificate.covered("t", 0, mark.until)

    def commit(self, compact: bool = False) -> None:
        self.certificate.merge()
        before = self.seen
        self.seen = {**before, **{k: v.to_json() for k, v in self.marks.items()}}
        self.store.commit(offsets={"certificate": {("t", 0): len(self.seen)}}, writer={},
                          certificate=self.certificate.summary(self.joiner.skipped),
                          changes=self.changes.line(self.joiner, self.certificate, before,
                                                    self.seen),
                          whole=self.whole, compact=compact)

    def whole(self) -> dict[str, Any]:
        return {**state.dump(self.joiner.state(), self.certificate), "seen": self.seen}

    def reopened(self) -> _Export:
        self.store.close()
        return _Export(self.root)


def _wchar() -> int:
    """Bytes this thread has passed to write() so far (Linux)."""
    with open("/proc/thread-self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))


def _journal(export: _Export) -> Path:
    return export.store.state_dir / export.store.files.journal


@pytest.fixture
def export(tmp_path: Path) -> _Export:
    """1 000 producers committed once (the state written whole), then two small commits
    (journaled)."""
    export = _Export(tmp_path / "ds")
    export.records(range(PRODUCERS), 0)
    export.commit()
    for seq in (1, 2):
        export.records(range(3), seq)
        export.commit()
    return export


@pytest.mark.skipif(not Path("/proc/thread-self/io").exists(), reason="Linux's /proc io")
def test_a_commit_writes_what_changed_not_the_state(export: _Export) -> None:
    whole = export.store.files.base_bytes
    written = []
    for changed in (2, 200):
        export.records(range(changed), 3)
        before = _wchar()
        export.commit()
        written.append(_wchar() - before)

    lines = _journal(export).read_text().splitlines()
    assert sorted(json.loads(lines[-2])["certificate"]["producers"]) == [
        "producer-0", "producer-1"]
    assert whole > 90_000  # 1 000 producers' ranges and re-delivery marks
    assert written[0] < whole / 20  # two producers changed: their rows and the manifest
    assert written[1] > 20 * len(lines[-2])  # a hundred times more changed: more written
    assert export.store.files.base_bytes == whole  # neither commit wrote the state whole


def test_the_journal_replayed_is_the_state_written_whole(export: _Export) -> None:
    expected = export.whole()

    reopened = export.reopened()

    assert reopened.store.files.journal_bytes > 0
    assert reopened.whole() == expected
    assert state.replay(*reopened.store.read_state(), "test") == expected


def test_what_a_killed_commit_left_past_the_committed_length_is_cut_at_opening(
        export: _Export) -> None:
    expected, committed = export.whole(), export.store.files.journal_bytes
    with open(_journal(export), "ab") as f:  # a whole line, then a torn one
        f.write(b'{"generation":4,"sessions":{"s":[true,false,false,null,0]}}\n{"generat')

    reopened = export.reopened()

    assert _journal(reopened).stat().st_size == committed
    assert reopened.whole() == expected
    reopened.records(range(5), 3)  # and commits go on from there
    reopened.commit()
    assert reopened.reopened().whole() == reopened.whole()


# A child that opens the export, reads new records and is SIGKILLed when its commit writes
# the manifest: after the journal's append (or the compaction's new state file).
_KILLED_AT_THE_MANIFEST = """
import os, signal, sys
from pathlib import Path
from rlmesh_stream.consumers.datasets import manifest
from tests.datasets.test_export_journal import _Export

export = _Export(Path(sys.argv[1]))
export.records(range(50), 3)
write = manifest.write_atomically
def killed(path, text, replace_dir=True):
    if path.name == "manifest.json":
        os.kill(os.getpid(), signal.SIGKILL)
    write(path, text, replace_dir)
manifest.write_atomically = killed
export.commit(compact=sys.argv[2] == "compaction")
"""


@pytest.mark.parametrize("commit", ["append", "compaction"])
def test_a_commit_killed_before_its_manifest_leaves_the_last_committed_state(
        export: _Export, commit: str) -> None:
    expected, generation = export.whole(), export.store.committed.generation
    files = sorted(p.name for p in export.store.state_dir.iterdir())
    export.store.close()

    child = subprocess.run([sys.executable, "-c", _KILLED_AT_THE_MANIFEST, str(export.root),
                            commit], capture_output=True, text=True, timeout=120)
    reopened = _Export(export.root)

    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    assert reopened.store.committed.generation == generation
    assert reopened.whole() == expected
    assert sorted(p.name for p in reopened.store.state_dir.iterdir()) == files


def test_a_compaction_writes_the_state_whole_and_keeps_it(tmp_path: Path) -> None:
    export = _Export(tmp_path / "ds")
    export.records(range(20), 0)
    export.commit()
    seq = 1
    while export.store.files.base_generation == 1:  # until the journal is compacted
        seq += 1
        export.records(range(20), seq)
        export.commit()
    expected = export.whole()

    reopened = export.reopened()

    assert reopened.whole() == expected
    assert reopened.certificate.producers["producer-7"]["ranges"] == [[0, 0], [2, seq]]
    # the state before it removed; the new journal begins at the next commit
    names = {p.name for p in reopened.store.state_dir.iterdir()}
    assert names == {"lock", "manifest.json", reopened.store.files.base}


def test_a_journal_changed_within_its_committed_length_is_refused_in_one_line(
        export: _Export) -> None:
    journal = _journal(export)
    export.store.close()
    data = bytearray(journal.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit, within what the manifest committed
    journal.write_bytes(bytes(data))

    result = CliRunner().invoke(main, ["export", "certificate", str(export.root)])

    assert result.exit_code != 0
    assert result.output.strip().splitlines() == [
        f"Error: {export.store.state_dir} is not a valid export state ({journal.name} does "
        f"not hold the {export.store.files.journal_bytes} bytes the manifest committed (its "
        "checksum differs: changed or cut short)); remove the dataset and export again"]
    with pytest.raises(DatasetError, match="is not a valid export state"):
        _Export(export.root)


def test_the_manifest_holds_the_totals_and_the_certificate_command_the_producers(
        export: _Export) -> None:
    certificate = export.certificate.summary(export.joiner.skipped)
    manifest = json.loads((export.store.state_dir / "manifest.json").read_text())

    printed = CliRunner().invoke(main, ["export", "certificate", str(export.root)])

    assert printed.exit_code == 0, printed.output
    assert json.loads(printed.output) == certificate
    assert len(certificate["producers"]) == PRODUCERS
    assert manifest["certificate"] == {k: v for k, v in certificate.items() if k != "producers"}
    assert export.store.committed.certificate == certificate  # in memory: whole


def test_a_directory_of_an_older_version_holding_the_state_whole_is_taken_on(
        export: _Export) -> None:
    export.commit(compact=True)  # the state whole in pending-<g>.json, no journal line
    expected = export.whole()
    path = export.store.state_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["state"]  # what an older rlmesh-stream wrote: no state files named
    manifest["certificate"] = export.certificate.summary(export.joiner.skipped)
    export.store.close()
    path.write_text(json.dumps(manifest))

    reopened = _Export(export.root)
    assert reopened.whole() == expected
    reopened.records(range(4), 3)
    reopened.commit()

    assert reopened.reopened().whole() == reopened.whole()
    assert os.path.exists(reopened.store.state_dir / reopened.store.files.base)
