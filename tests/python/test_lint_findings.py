"""The test command's "lints" phase (scripts/lib/lint-findings): it reads
the build's diagnostics as cargo replays them (`--message-format=json`),
prints each warning, names each one in a line the runner's summary picks
out, and fails on any, as `cargo clippy -- -D warnings` would. Fed cargo's
own record shapes; nothing here compiles."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_FINDINGS = ROOT / "scripts" / "lib" / "lint-findings"


def compiler_message(level, text, code=None, file_name="crates/wire/src/lib.rs", line=3, target="shellgate_wire"):
    spans = [] if file_name is None else [
        {"file_name": file_name, "line_start": line, "line_end": line, "is_primary": True}]
    return {
        "reason": "compiler-message",
        "package_id": "path+file:///repo/crates/wire#shellgate-wire@0.1.0",
        "target": {"name": target, "kind": ["lib"]},
        "message": {
            "message": text,
            "code": None if code is None else {"code": code, "explanation": None},
            "level": level,
            "spans": spans,
            "rendered": f"{level}: {text}\n --> {file_name}:{line}:5\n",
        },
    }


def artifact():
    return {"reason": "compiler-artifact", "package_id": "path+file:///repo/crates/wire#shellgate-wire@0.1.0",
            "target": {"name": "shellgate_wire", "kind": ["lib"]}, "fresh": True}


def run(records):
    stdin = "".join(json.dumps(record) + "\n" for record in records)
    return subprocess.run([sys.executable, str(LINT_FINDINGS)], input=stdin, capture_output=True, text=True,
                          timeout=60)


def test_a_clean_build_passes():
    result = run([artifact(), {"reason": "build-finished", "success": True}])
    assert result.returncode == 0, result.stdout
    assert "no lint findings" in result.stdout


def test_each_warning_is_printed_and_named_and_fails_the_phase():
    unwrap = compiler_message("warning", "used `unwrap()` on an `Option` value", "clippy::unwrap_used")
    unused = compiler_message("warning", "unused variable: `x`", "unused_variables",
                              file_name="crates/shellgate/benches/engine.rs", line=12, target="engine")
    summary = compiler_message("warning", "2 warnings emitted", file_name=None)
    result = run([unwrap, artifact(), unused, summary, {"reason": "build-finished", "success": True}])
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    # Printed as the compiler rendered them, then named one a line.
    assert "warning: used `unwrap()` on an `Option` value" in lines
    assert "error: clippy::unwrap_used at crates/wire/src/lib.rs:3: used `unwrap()` on an `Option` value" in lines
    assert "error: unused_variables at crates/shellgate/benches/engine.rs:12: unused variable: `x`" in lines
    # The crate's count of its warnings is no finding of its own.
    assert not any("emitted" in line for line in lines if line.startswith("error:"))
    assert "2 lint finding(s)" in result.stdout


def test_a_finding_reported_by_a_library_and_its_test_build_is_named_once():
    unwrap = compiler_message("warning", "used `unwrap()` on an `Option` value", "clippy::unwrap_used")
    result = run([unwrap, unwrap, {"reason": "build-finished", "success": True}])
    assert result.returncode == 1
    assert result.stdout.count("error: clippy::unwrap_used at") == 1


def test_a_compile_error_fails_it_too():
    error = compiler_message("error", "cannot find value `y` in this scope", "E0425")
    result = run([error, {"reason": "build-finished", "success": False}])
    assert result.returncode == 1
    assert "error: E0425 at crates/wire/src/lib.rs:3: cannot find value `y` in this scope" in result.stdout


def test_a_failed_build_without_a_message_fails():
    result = run([{"reason": "build-finished", "success": False}])
    assert result.returncode == 1
    assert "the build failed" in result.stdout


def test_lines_that_are_not_cargo_records_are_skipped():
    stdin = "a build script's stray line\n" + json.dumps({"reason": "build-finished", "success": True}) + "\n"
    result = subprocess.run([sys.executable, str(LINT_FINDINGS)], input=stdin, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout
