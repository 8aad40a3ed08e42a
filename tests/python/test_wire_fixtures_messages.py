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


def test_every_create_param_of_the_sdk_is_consumed_or_carried():
    """Each key of the SDK's MessageCreateParams (and the beta's) is a typed
    field of CreateMessage or in its CARRIED list, and each of
    MessageCountTokensParams one of CountTokens or COUNT_CARRIED: what the
    SDK can send is never refused. `betas` is no body field: the
    SDK sends it as the `anthropic-beta` header."""
    from anthropic.types import message_count_tokens_params as count
    from anthropic.types import message_create_params as create
    from anthropic.types.beta import message_count_tokens_params as beta_count
    from anthropic.types.beta import message_create_params as beta_create

    source = (FIXTURES.parents[1] / "src" / "messages" / "request.rs").read_text()
    create_part, count_part = source.split("pub const COUNT_CARRIED", 1)
    create_keys = (set(create.MessageCreateParamsBase.__annotations__)
                   | set(beta_create.MessageCreateParamsBase.__annotations__) | {"stream"}) - {"betas"}
    count_keys = (set(count.MessageCountTokensParams.__annotations__)
                  | set(beta_count.MessageCountTokensParams.__annotations__)) - {"betas"}
    known = lambda part, k: f'"{k}"' in part or f"pub {k}:" in part
    missing = [k for k in sorted(create_keys) if not known(create_part, k)]
    assert not missing, missing
    count_source = count_part.split("pub struct OutputConfig", 1)[0]
    missing = [k for k in sorted(count_keys) if not known(count_source, k)]
    assert not missing, missing
