"""The Responses API fixtures of `shellgate_wire::responses` are what the
installed `openai` SDK produces: the generator is rerun into a temporary
folder and must write exactly the committed files (an SDK upgrade that
changes a shape fails here, and the fixtures are regenerated and the Rust
types checked against them)."""

import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "crates" / "wire" / "fixtures" / "responses"


def test_committed_fixtures_are_what_the_sdk_writes(tmp_path):
    subprocess.run([sys.executable, str(FIXTURES / "generate.py"), str(tmp_path)], check=True)
    written = {p.name: p.read_text() for p in tmp_path.glob("*.json")}
    committed = {p.name: p.read_text() for p in FIXTURES.glob("*.json")}
    assert sorted(written) == sorted(committed)
    changed = [name for name in written if written[name] != committed[name]]
    assert not changed, f"regenerate with generate.py: {changed}"


def test_every_create_param_of_the_sdk_is_consumed_or_carried():
    """Each key of the SDK's ResponseCreateParams is either a typed field
    of CreateResponse or in its CARRIED list (none is refused)."""
    from openai.types.responses import response_create_params as params
    source = (FIXTURES.parents[1] / "src" / "responses" / "request.rs").read_text()
    keys = set(params.ResponseCreateParamsBase.__annotations__) | {"stream"}
    missing = [k for k in sorted(keys) if f'"{k}"' not in source and f"pub {k}:" not in source]
    assert not missing, missing
