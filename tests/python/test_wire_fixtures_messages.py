"""The Messages API fixtures of `shellgate_wire::messages` are what the
installed `anthropic` SDK makes: `crates/wire/fixtures/messages/generate.py`
rerun into a temporary directory writes the same files as are committed
(an SDK upgrade that changes a shape fails here; rerun the generator and
the Rust round-trip test then)."""

import pathlib
import subprocess
import sys

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "crates" / "wire" / "fixtures" / "messages"


def files(root):
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*.json"))}


def test_the_committed_fixtures_are_what_the_sdk_makes(tmp_path):
    subprocess.run([sys.executable, str(FIXTURES / "generate.py"), str(tmp_path)], check=True)
    fresh, committed = files(tmp_path), files(FIXTURES)
    assert fresh.keys() == committed.keys()
    drifted = [name for name in fresh if fresh[name] != committed[name]]
    assert not drifted, f"the SDK now writes these differently: {drifted}"
