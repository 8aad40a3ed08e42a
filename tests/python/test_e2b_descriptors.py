"""envd's message types are generated from the descriptors E2B's SDK ships
(crates/wire/proto/envd.binpb); this checks the committed set is still the
installed SDK's, so a protocol change in a new SDK is noticed."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_envd_descriptors_are_the_installed_sdks():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "envd-descriptors.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
