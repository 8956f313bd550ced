"""Fetching through huggingface_hub against a real loopback Hub (tests/hub_server.py), no patching."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.audit import hub
from conformance.audit.hub import HubSettings, fetch_checkpoint, fetch_many
from conformance.formats import checkpoint_files
from tests import hub_server
from tests.audit_helpers import serve_fixtures
from tests.hub_server import HubServer

CONFIG = json.dumps({"response_template": {"start_anchor": "<a>", "fields": {"content": {}}}})
TOKEN = "hf_test_secret_token_value"


@pytest.fixture(scope="module")
def hub_url() -> Iterator[HubServer]:
    with HubServer() as server:
        server.add_repo("t/ok", {"tokenizer_config.json": CONFIG, "chat_template.jinja": "{{ messages }}"},
                        refs={"v1.0": "0" * 40})
        server.add_repo("t/unauthorized", {"tokenizer_config.json": CONFIG}, mode=hub_server.UNAUTHORIZED)
        server.add_repo("t/gated", {"tokenizer_config.json": CONFIG}, mode=hub_server.GATED)
        server.add_repo("t/broken", {"tokenizer_config.json": CONFIG}, mode=hub_server.SERVER_ERROR)
        server.add_repo("t/slow", {"tokenizer_config.json": CONFIG}, mode=hub_server.SLOW, delay_s=3)
        server.add_repo("t/cut-once", {"tokenizer_config.json": CONFIG}, mode=hub_server.TRUNCATED_ONCE)
        server.add_repo("t/cut", {"tokenizer_config.json": CONFIG}, mode=hub_server.TRUNCATED)
        server.add_repo("t/huge", {"tokenizer_config.json": b" " * (hub.MAX_FILE_BYTES + 1)})
        server.add_repo("t/huge-template", {"tokenizer_config.json": CONFIG, "chat_template.jinja": b"x" * (hub.MAX_FILE_BYTES + 1)})
        server.add_repo("t/bad-json", {"tokenizer_config.json": '{\n  "a": 1,\n}\n'})
        server.add_repo("t/list-json", {"tokenizer_config.json": "[1, 2]"})
        server.add_repo("t/bad-chat-json", {"tokenizer_config.json": CONFIG, "chat_template.json": "{oops"})
        server.add_repo("t/no-config", {"chat_template.jinja": "x"})
        server.add_repo("t/private", {"tokenizer_config.json": CONFIG}, mode=hub_server.PRIVATE, token=TOKEN)
        server.add_repo("t/renamed-to", {"tokenizer_config.json": CONFIG})
        server.renamed["t/renamed-from"] = "t/renamed-to"
        yield server


def settings(server: HubServer, cache: Path, **changes) -> HubSettings:
    return HubSettings(**{"endpoint": server.url, "cache_dir": str(cache), "offline": False, "timeout": 1.0, **changes})


def test_fetches_config_and_optional_files_and_resolves_the_branch(hub_url: HubServer, tmp_path: Path) -> None:
    result = fetch_checkpoint("t/ok", "main", settings(hub_url, tmp_path))
    assert (result.status, result.error) == ("ok", None)
    assert result.commit == hub_url.repos["t/ok"].commit
    assert sorted(result.files) == ["chat_template.jinja", "tokenizer_config.json"]
    assert result.tokenizer_config == json.loads(CONFIG)
    assert result.files["tokenizer_config.json"].is_relative_to(tmp_path)


def test_pinned_commit_in_cache_costs_no_request(hub_url: HubServer, tmp_path: Path) -> None:
    commit = hub_url.repos["t/ok"].commit
    first = fetch_checkpoint("t/ok", commit, settings(hub_url, tmp_path))
    assert hub_url.requests_for("t/ok")  # the cold fetch did go to the Hub
    hub_url.clear_log()
    second = fetch_checkpoint("t/ok", commit, settings(hub_url, tmp_path))
    assert hub_url.requests_for("t/ok") == []
    assert (second.status, second.commit, second.files) == ("ok", commit, first.files)


def test_cached_absence_of_optional_files_costs_no_request(hub_url: HubServer, tmp_path: Path) -> None:
    commit = hub_url.add_repo("t/only-config", {"tokenizer_config.json": CONFIG}).commit
    fetch_checkpoint("t/only-config", commit, settings(hub_url, tmp_path))
    hub_url.clear_log()
    result = fetch_checkpoint("t/only-config", commit, settings(hub_url, tmp_path))
    assert (result.status, list(result.files)) == ("ok", ["tokenizer_config.json"])
    assert hub_url.requests_for("t/only-config") == []


def test_branch_revision_asks_the_hub_again(hub_url: HubServer, tmp_path: Path) -> None:
    fetch_checkpoint("t/ok", "main", settings(hub_url, tmp_path))
    hub_url.clear_log()
    fetch_checkpoint("t/ok", "main", settings(hub_url, tmp_path))
    assert [r.method for r in hub_url.requests_for("t/ok")][:1] == ["HEAD"]


def test_offline_mode_serves_from_cache_and_says_what_is_missing(hub_url: HubServer, tmp_path: Path) -> None:
    fetch_checkpoint("t/ok", "main", settings(hub_url, tmp_path))
    hub_url.clear_log()
    offline = settings(hub_url, tmp_path, offline=True)
    cached = fetch_checkpoint("t/ok", "main", offline)
    assert (cached.status, cached.commit) == ("ok", hub_url.repos["t/ok"].commit)
    missing = fetch_checkpoint("t/gated", "main", offline)
    assert missing.status == hub.NOT_CACHED
    assert "HF_HUB_OFFLINE is set" in missing.error
    assert hub_url.log == []


@pytest.mark.parametrize("repo, revision, status, message", [
    ("t/missing", "main", hub.NOT_FOUND, "repository not found; if it is private, set HF_TOKEN"),
    ("t/ok", "no-such-branch", hub.NOT_FOUND, "revision not found"),
    ("t/no-config", "main", hub.NOT_FOUND, "tokenizer_config.json not found in the repository"),
    ("t/unauthorized", "main", hub.UNAUTHORIZED, "HTTP 401, not authorized"),
    ("t/private", "main", hub.UNAUTHORIZED, "set HF_TOKEN"),
    ("t/gated", "main", hub.GATED, "the repo is gated; set HF_TOKEN"),
    ("t/broken", "main", hub.SERVER_ERROR, "the Hub answered HTTP 500 for tokenizer_config.json"),
    ("t/slow", "main", hub.TIMEOUT, "no answer from the Hub for tokenizer_config.json in time"),
    ("t/huge", "main", hub.TOO_LARGE, f"tokenizer_config.json is {hub.MAX_FILE_BYTES + 1} bytes, over the"),
    ("t/bad-json", "main", checkpoint_files.INVALID_JSON, "tokenizer_config.json: invalid JSON at line 3, column 1: "
                                             "Expecting property name enclosed in double quotes"),
    ("t/list-json", "main", checkpoint_files.INVALID_JSON, "tokenizer_config.json: top level is a JSON list, expected an object"),
    ("t/bad-chat-json", "main", checkpoint_files.INVALID_JSON, "chat_template.json: invalid JSON at line 1, column 2"),
])
def test_failures_are_states_with_clear_messages(hub_url: HubServer, tmp_path: Path, repo: str, revision: str,
                                                 status: str, message: str) -> None:
    started = time.monotonic()
    result = fetch_checkpoint(repo, revision, settings(hub_url, tmp_path))
    assert (result.status, result.tokenizer_config) == (status, None)
    assert message in result.error
    assert time.monotonic() - started < 3  # no multi-second retry loops on a failure we can name


@pytest.mark.parametrize("repo, filename", [("t/huge", "tokenizer_config.json"), ("t/huge-template", "chat_template.jinja")])
def test_a_huge_file_is_refused_before_download(hub_url: HubServer, tmp_path: Path, repo: str, filename: str) -> None:
    hub_url.clear_log()
    result = fetch_checkpoint(repo, "main", settings(hub_url, tmp_path))
    assert result.status == hub.TOO_LARGE and result.error.startswith(f"{filename} is ")
    assert not [r for r in hub_url.requests_for(repo) if r.method == "GET" and r.path.endswith(filename)]


def test_token_is_sent_and_never_shown(hub_url: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_ENDPOINT", hub_url.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    hub_url.clear_log()
    result = fetch_checkpoint("t/private", "main", HubSettings.from_env(timeout=1.0))
    assert result.status == "ok"
    assert all(request.authorized for request in hub_url.requests_for("t/private"))
    monkeypatch.setenv("HF_TOKEN", TOKEN + "-wrong")
    refused = fetch_checkpoint("t/private", "main", HubSettings.from_env(timeout=1.0))
    assert refused.status == hub.UNAUTHORIZED
    assert TOKEN not in refused.error and TOKEN not in repr(HubSettings.from_env())


def test_settings_follow_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HF_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", *hub.TIMEOUT_VARIABLES, "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9/")
    defaults = HubSettings.from_env()
    assert (defaults.cache_dir, defaults.endpoint, defaults.offline, defaults.timeout, defaults.token) == (
        str(tmp_path / "home" / "hub"), "http://127.0.0.1:9", False, hub.DEFAULT_TIMEOUT_S, None)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "3")
    changed = HubSettings.from_env()
    assert (changed.cache_dir, changed.offline, changed.timeout) == (str(tmp_path / "cache"), True, 3.0)
    for bad in ("soon", "0", "-1"):
        monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", bad)
        with pytest.raises(ValueError, match=f"HF_HUB_ETAG_TIMEOUT='{bad}' is not a positive number of seconds"):
            HubSettings.from_env()


def timeout_under(environment: dict[str, str], timeout: float | None = None) -> float:
    """HubSettings.from_env's timeout with exactly these of the two timeout variables set. (huggingface_hub reads
    them once, as whole seconds, when first imported: a fraction must not be set then.)"""
    with pytest.MonkeyPatch.context() as patch:
        for name in hub.TIMEOUT_VARIABLES:
            patch.delenv(name, raising=False)
        for name, value in environment.items():
            patch.setenv(name, value)
        return HubSettings.from_env(timeout).timeout


@pytest.mark.parametrize("environment, timeout", [
    ({}, hub.DEFAULT_TIMEOUT_S),
    ({"HF_HUB_ETAG_TIMEOUT": "3"}, 3.0),
    ({"HF_HUB_DOWNLOAD_TIMEOUT": "30"}, 30.0),
    ({"HF_HUB_DOWNLOAD_TIMEOUT": "2.5"}, 2.5),  # set alone, it is the timeout even below the default
    ({"HF_HUB_ETAG_TIMEOUT": "3", "HF_HUB_DOWNLOAD_TIMEOUT": "30"}, 30.0),
    ({"HF_HUB_ETAG_TIMEOUT": "30", "HF_HUB_DOWNLOAD_TIMEOUT": "3"}, 30.0),
])
def test_the_timeout_is_the_larger_of_the_etag_and_download_timeouts_set(environment, timeout) -> None:
    assert timeout_under(environment) == timeout
    assert timeout_under(environment, timeout=7.0) == 7.0  # --timeout wins


def test_a_bad_download_timeout_is_named() -> None:
    with pytest.raises(ValueError, match="HF_HUB_DOWNLOAD_TIMEOUT='soon' is not a positive number of seconds"):
        timeout_under({"HF_HUB_ETAG_TIMEOUT": "3", "HF_HUB_DOWNLOAD_TIMEOUT": "soon"})


def test_an_answer_slower_than_the_etag_timeout_arrives_within_the_download_timeout(hub_url: HubServer,
                                                                                   tmp_path: Path) -> None:
    hub_url.add_repo("t/lagging", {"tokenizer_config.json": CONFIG}, mode=hub_server.SLOW, delay_s=0.5)
    etag_only = timeout_under({"HF_HUB_ETAG_TIMEOUT": "0.2"})
    with_download = timeout_under({"HF_HUB_ETAG_TIMEOUT": "0.2", "HF_HUB_DOWNLOAD_TIMEOUT": "2"})
    cut = fetch_checkpoint("t/lagging", "main", settings(hub_url, tmp_path / "a", timeout=etag_only))
    assert cut.status == hub.TIMEOUT, cut.error
    arrived = fetch_checkpoint("t/lagging", "main", settings(hub_url, tmp_path / "b", timeout=with_download))
    assert (arrived.status, arrived.tokenizer_config) == ("ok", json.loads(CONFIG))


def test_a_body_truncated_once_is_downloaded_again(hub_url: HubServer, tmp_path: Path) -> None:
    hub_url.clear_log()
    result = fetch_checkpoint("t/cut-once", "main", settings(hub_url, tmp_path))
    assert (result.status, result.tokenizer_config) == ("ok", json.loads(CONFIG))
    gets = [r for r in hub_url.requests_for("t/cut-once") if r.method == "GET"]
    assert len(gets) == 2  # huggingface_hub's own retry after the cut


def test_a_body_that_never_arrives_is_a_network_error(hub_url: HubServer, tmp_path: Path) -> None:
    result = fetch_checkpoint("t/cut", "main", settings(hub_url, tmp_path))  # huggingface_hub retries ~5 s
    assert result.status == hub.NETWORK_ERROR
    assert "tokenizer_config.json" in result.error


def test_same_host_redirect_of_a_renamed_repo_is_followed(hub_url: HubServer, tmp_path: Path) -> None:
    result = fetch_checkpoint("t/renamed-from", "main", settings(hub_url, tmp_path))
    assert (result.status, result.commit) == ("ok", hub_url.repos["t/renamed-to"].commit)


def test_fetches_run_concurrently_and_failures_do_not_stop_the_others(hub_url: HubServer, tmp_path: Path) -> None:
    for index in range(6):
        hub_url.add_repo(f"t/lag-{index}", {"tokenizer_config.json": CONFIG}, mode=hub_server.SLOW, delay_s=0.4)
    pairs = [(f"t/lag-{index}", "main") for index in range(6)] + [("t/missing", "main"), ("t/ok", "main")]
    started = time.monotonic()
    results = {result.repo: result for result in fetch_many(pairs, settings(hub_url, tmp_path, timeout=5.0), workers=8)}
    elapsed = time.monotonic() - started
    assert {repo: result.status for repo, result in results.items()} == {
        **{f"t/lag-{index}": "ok" for index in range(6)}, "t/missing": hub.NOT_FOUND, "t/ok": "ok"}
    # Each slow repo costs >= 3 answers x 0.4 s (two HEADs and a GET); one after another that is > 7 s.
    assert elapsed < 4, elapsed


def test_an_abandoned_fetch_does_not_wait_for_the_queued_checkpoints(hub_url: HubServer, tmp_path: Path) -> None:
    for index in range(10):
        hub_url.add_repo(f"t/queued-{index}", {"tokenizer_config.json": CONFIG}, mode=hub_server.SLOW, delay_s=0.2)
    started = time.monotonic()
    results = fetch_many([(f"t/queued-{index}", "main") for index in range(10)], settings(hub_url, tmp_path), workers=1)
    assert next(results).status == "ok"
    results.close()  # what a Ctrl-C in the consumer does to the generator
    # One checkpoint costs about five answers x 0.2 s; all ten one after another would take ~10 s.
    assert time.monotonic() - started < 4


def test_real_fixtures_are_served_and_fetched_byte_exact(tmp_path: Path) -> None:
    with HubServer() as server:
        commits = serve_fixtures(server)
        results = list(fetch_many(list(commits.items()), settings(server, tmp_path)))
    assert {r.repo: (r.status, r.commit) for r in results} == {repo: ("ok", commit) for repo, commit in commits.items()}
    for result in results:
        served = server.repos[result.repo].files
        assert {name: path.read_bytes() for name, path in result.files.items()} == served, result.repo
    conic = next(r for r in results if r.repo == "ConicCat/Gemma4-GarnetV2-31B")
    assert "response_schema" in conic.tokenizer_config
