"""The conformance CLI's ``hook`` flags (CLIENT-CLI.md): bad usage is exit 2 with the usage
text and no request; the twin, well-formed flags, reaches the configuration step (an empty
configuration directory is then a configuration error, still before any request)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from converge import conformance


@pytest.mark.parametrize("args", [
    ["--path", "no-slash", "127.0.0.1", "443"],  # a path must start with /
    ["127.0.0.1"],  # no port
    ["127.0.0.1", "port"],  # a port that is not a number
    ["--first"],  # a flag without its value
    ["--frobnicate", "127.0.0.1", "443"],  # an unknown flag
])
def test_bad_hook_usage_is_exit_2_with_the_usage(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = io.StringIO()
    assert conformance.main(["hook", "--config-dir", str(tmp_path), *args], out) == 2
    assert out.getvalue() == ""  # nothing was fetched, nothing printed as an answer
    assert "usage:" in capsys.readouterr().err


def test_well_formed_hook_flags_reach_the_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = io.StringIO()
    code = conformance.main(["hook", "--config-dir", str(tmp_path / "missing"), "--path", "/keep",
                             "--follow-redirects", "--first", "https://a.test:1/",
                             "--unhooked-first", "127.0.0.1", "443"], out)
    assert code == 2
    line = json.loads(out.getvalue())
    assert line["error"] != "usage" and "message" in line
    assert "usage:" not in capsys.readouterr().err
