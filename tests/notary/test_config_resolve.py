"""Settings, the TOML config file, CLI flag precedence, and the static name map."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from notary.cli import _parser, settings_from_args
from notary.config import MAX_CONFIG, Settings, load_toml, parse_listen
from notary.errors import BadConfig, TargetUnreachable
from notary.resolve import Resolver, parse_hosts_text, parse_resolve_option

# -- TOML ---------------------------------------------------------------------------------


def write(tmp_path: Path, text: str | bytes, name: str = "notary.toml") -> Path:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


def test_toml_values_are_coerced(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        """
[notary]
data-dir = "/srv/notary"
listen = ["127.0.0.1:8443", "[::1]:4242"]
workers = 2
probe_timeout = 3
negative-ttl = 1.5
allow-target = "10.0.0.0/8"
tls = false
hostname = "notary.example"
""",
    )
    values = load_toml(p)
    s = Settings(**values)
    s.check()
    assert s.data_dir == Path("/srv/notary")
    assert s.listen_addrs() == [("127.0.0.1", 8443), ("::1", 4242)]
    assert s.workers == 2
    assert s.probe_timeout == 3.0 and isinstance(s.probe_timeout, float)
    assert s.negative_ttl == 1.5
    assert s.allow_target == ["10.0.0.0/8"]
    assert s.tls is False
    assert s.hostname == "notary.example"


def test_top_level_keys_work_without_a_table(tmp_path: Path) -> None:
    assert load_toml(write(tmp_path, "workers = 3\n")) == {"workers": 3}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("workers = ", "not valid TOML"),
        ("[notary]\nnot_a_key = 1\n", "unknown key"),
        ("workers = '2'\n", "must be an integer"),
        ("workers = true\n", "must be an integer"),
        ("workers = 1.5\n", "must be an integer"),
        ("tls = 'yes'\n", "true or false"),
        ("probe_timeout = 'fast'\n", "must be a number"),
        ("probe_timeout = false\n", "must be a number"),
        ("listen = [1, 2]\n", "list of strings"),
        ("data_dir = 5\n", "string path"),
        ("hostname = 5\n", "must be a string"),
        ("notary = 5\n", "must be a table"),
    ],
)
def test_bad_toml(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(BadConfig) as info:
        load_toml(write(tmp_path, text))
    assert message in info.value.message


def test_toml_io_errors(tmp_path: Path) -> None:
    with pytest.raises(BadConfig, match="cannot read"):
        load_toml(tmp_path / "missing.toml")
    with pytest.raises(BadConfig, match="not valid TOML"):
        load_toml(write(tmp_path, b"workers = 1 # \xff\xfe\n"))
    with pytest.raises(BadConfig, match="larger than"):
        load_toml(write(tmp_path, "# " + "x" * MAX_CONFIG + "\n"))
    with pytest.raises(BadConfig):
        load_toml(write(tmp_path, "x = " + "[" * 5000 + "]" * 5000 + "\n"))


@pytest.mark.parametrize(
    "overrides",
    [
        {"workers": 0},
        {"workers": 65},
        {"probe_timeout": 0},
        {"probe_timeout": -1.0},
        {"max_probes": 0},
        {"resolver_threads": 0},
        {"resolver_threads": 1025},
        {"lru_entries": 0},
        {"max_body": 0},
        {"recheck_after": -1},
        {"negative_ttl": -0.5},
        {"listen": ["nope"]},
        {"listen": ["127.0.0.1:70000"]},
    ],
)
def test_settings_check_rejects(overrides: dict[str, object]) -> None:
    with pytest.raises(BadConfig):
        Settings(**overrides).check()  # type: ignore[arg-type]


def test_resolver_threads_from_the_command_line(tmp_path: Path) -> None:
    """--resolver-threads reaches the notary's resolver, with the probe shares applied to
    it; the twins: 0 and past 1,024 are refused by the check above."""
    from notary.cli import _parser, settings_from_args
    from notary.web import build_resolver

    args = _parser().parse_args(["serve", "--data-dir", str(tmp_path),
                                      "--resolver-threads", "40"])
    s = settings_from_args(args)
    s.check()
    r = build_resolver(s)
    assert (r.threads, r._per_client, r._per_group) == (40, 10, 20)


def test_settings_defaults_pass_the_check() -> None:
    s = Settings()
    s.check()
    assert s.probe_timeout == 2.0  # as in the study
    assert s.db_path == Path("notary-data/notary.sqlite3")


@pytest.mark.parametrize(
    ("spec", "expect"),
    [
        ("127.0.0.1:8443", ("127.0.0.1", 8443)),
        ("[::1]:443", ("::1", 443)),
        ("localhost:0", ("localhost", 0)),
        ("0.0.0.0:65535", ("0.0.0.0", 65535)),
    ],
)
def test_parse_listen(spec: str, expect: tuple[str, int]) -> None:
    assert parse_listen(spec) == expect


@pytest.mark.parametrize(
    "spec", ["", "8443", ":8443", "host:", "host:65536", "[::1:443", "[nope]:443", "h:p"]
)
def test_parse_listen_rejects(spec: str) -> None:
    with pytest.raises(BadConfig):
        parse_listen(spec)


def test_flags_win_over_the_config_file(tmp_path: Path) -> None:
    cfg = write(tmp_path, "[notary]\nworkers = 3\nprobe_timeout = 5\nmax_probes = 7\n")
    args = _parser().parse_args(
        ["serve", "--config", str(cfg), "--workers", "2", "--allow-target", "127.0.0.0/8",
         "--no-tls"]
    )
    s = settings_from_args(args)
    assert s.workers == 2  # flag
    assert s.probe_timeout == 5.0 and s.max_probes == 7  # file
    assert s.allow_target == ["127.0.0.0/8"]
    assert s.tls is False


def test_bad_flag_values_are_bad_config(tmp_path: Path) -> None:
    args = _parser().parse_args(["serve", "--workers", "0"])
    with pytest.raises(BadConfig):
        settings_from_args(args)


# -- the static name map --------------------------------------------------------------------


def test_parse_resolve_option() -> None:
    assert parse_resolve_option("Site.Test=127.0.0.1") == (
        "site.test",
        ipaddress.ip_address("127.0.0.1"),
    )
    assert parse_resolve_option("v6.test=[::1]")[1] == ipaddress.ip_address("::1")


@pytest.mark.parametrize(
    "spec", ["site.test", "site.test=", "=127.0.0.1", "site.test=nope", "bad name=127.0.0.1"]
)
def test_parse_resolve_option_rejects(spec: str) -> None:
    with pytest.raises(BadConfig):
        parse_resolve_option(spec)


def test_hosts_text() -> None:
    m = parse_hosts_text(
        "# comment\n\n127.0.0.1 a.test B.test # trailing\n::1 a.test\n127.0.0.1 a.test\n"
    )
    assert m == {
        "a.test": [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")],
        "b.test": [ipaddress.ip_address("127.0.0.1")],
    }


@pytest.mark.parametrize("text", ["127.0.0.1\n", "nope a.test\n", "127.0.0.1 bad_na me!\n"])
def test_hosts_text_rejects(text: str) -> None:
    with pytest.raises(BadConfig) as info:
        parse_hosts_text(text, "f")
    assert info.value.message.startswith("f:1:")


async def test_resolver_static_map_and_literals() -> None:
    r = Resolver({"a.test": [ipaddress.ip_address("10.0.0.1")]}, use_system=False)
    assert await r.resolve("a.test") == [ipaddress.ip_address("10.0.0.1")]
    assert await r.resolve("192.0.2.1") == [ipaddress.ip_address("192.0.2.1")]
    assert await r.resolve("::1") == [ipaddress.ip_address("::1")]
    with pytest.raises(TargetUnreachable):
        await r.resolve("b.test")
