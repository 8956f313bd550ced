"""Fetching checkpoint metadata from the Hugging Face Hub through huggingface_hub, concurrently.

Per checkpoint: `tokenizer_config.json` (required) plus `chat_template.jinja` / `chat_template.json` and `config.json`
(its `model_type`) when the repo has them. The standard Hub cache is used, so a checkpoint pinned to a commit that is already
cached (including the cached absence of optional files) costs no HTTP request. Every failure becomes a
status on that checkpoint; the others go on.

Environment, read at call time: HF_TOKEN (never printed), HF_ENDPOINT, HF_HUB_CACHE / HF_HOME,
HF_HUB_OFFLINE, HF_HUB_ETAG_TIMEOUT and HF_HUB_DOWNLOAD_TIMEOUT (see `hub_timeout`).
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.audit.checkpoint_list import COMMIT_SHA
from conformance.formats.checkpoint_files import (
    GATED,
    MAX_FILE_BYTES,
    NETWORK_ERROR,
    NOT_CACHED,
    NOT_FOUND,
    OK,
    SERVER_ERROR,
    TIMEOUT,
    TOKENIZER_CONFIG,
    TOO_LARGE,
    UNAUTHORIZED,
    FetchError,
    read_json_file,
    read_tokenizer_config,
    too_large,
)

OPTIONAL_FILES = ("chat_template.jinja", "chat_template.json", "config.json", "generation_config.json")
DEFAULT_TIMEOUT_S = 10.0
TIMEOUT_VARIABLES = ("HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT")
FILE_DEADLINE_FACTOR = 3  # each file, redirects and retries included, must arrive within 3 x the timeout
DEFAULT_WORKERS = 16
TOKEN_HINT = "set HF_TOKEN to a token that can read it; for a gated repo, accept its terms on the Hub first"


@dataclass(frozen=True)
class HubSettings:
    endpoint: str | None
    cache_dir: str
    offline: bool
    timeout: float
    token: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, timeout: float | None = None) -> HubSettings:
        env = os.environ
        home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")
        return cls(
            endpoint=(env.get("HF_ENDPOINT") or "").rstrip("/") or None,
            cache_dir=env.get("HF_HUB_CACHE") or os.path.join(home, "hub"),
            offline=(env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE") or "").upper() in {"1", "ON", "YES", "TRUE"},
            timeout=timeout if timeout is not None else hub_timeout(),
            token=env.get("HF_TOKEN") or None,
        )


def hub_timeout() -> float:
    """Seconds to wait for the Hub's answer (`--timeout` unless given): the larger of HF_HUB_ETAG_TIMEOUT
    (huggingface_hub's wait for a file's metadata) and HF_HUB_DOWNLOAD_TIMEOUT (its wait for the file) among
    those set, else DEFAULT_TIMEOUT_S. One value bounds every request of a file here and its deadline, so the
    slower of the two waits huggingface_hub is told to allow is never cut short."""
    return max((_seconds(variable) for variable in TIMEOUT_VARIABLES if os.environ.get(variable)),
               default=DEFAULT_TIMEOUT_S)


def _seconds(variable: str) -> float:
    value = os.environ[variable]
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ValueError(f"{variable}={value!r} is not a positive number of seconds")
    return seconds


@dataclass
class FetchedCheckpoint:
    repo: str
    revision: str
    commit: str | None = None
    status: str = OK
    error: str | None = None
    files: dict[str, Path] = field(default_factory=dict)  # the files the repo has, as cached on disk
    tokenizer_config: dict | None = None
    startup_error: str | None = None  # see FetchError


def _redact(message: str, settings: HubSettings) -> str:
    return message.replace(settings.token, "***") if settings.token else message


def _classify(exc: BaseException, filename: str) -> FetchError:
    """Map a huggingface_hub / httpx failure to a failure kind with a readable message."""
    import httpx2
    from huggingface_hub import errors

    if isinstance(exc, FetchError):
        return exc
    if isinstance(exc, errors.GatedRepoError):
        return FetchError(GATED, f"the repo is gated; {TOKEN_HINT}")
    if isinstance(exc, errors.HfHubHTTPError) and exc.response is not None:
        status = exc.response.status_code
        if status in (401, 403):
            return FetchError(UNAUTHORIZED, f"HTTP {status}, not authorized (a private or gated repo, or an invalid token); {TOKEN_HINT}")
        if isinstance(exc, errors.RevisionNotFoundError):
            return FetchError(NOT_FOUND, "revision not found")
        if isinstance(exc, errors.RepositoryNotFoundError):
            return FetchError(NOT_FOUND, f"repository not found; if it is private, {TOKEN_HINT}")
        if isinstance(exc, errors.RemoteEntryNotFoundError) or status == 404:
            return FetchError(NOT_FOUND, f"{filename} not found in the repository")
        if status >= 500:
            return FetchError(SERVER_ERROR, f"the Hub answered HTTP {status} for {filename}")
        return FetchError(SERVER_ERROR, f"unexpected HTTP {status} for {filename}")
    if isinstance(exc, httpx2.TimeoutException):
        return FetchError(TIMEOUT, f"no answer from the Hub for {filename} in time")
    if isinstance(exc, httpx2.HTTPError):
        return FetchError(NETWORK_ERROR, f"{filename}: {type(exc).__name__}: {exc}")
    if isinstance(exc, errors.LocalEntryNotFoundError) and exc.__cause__ is not None:
        return _classify(exc.__cause__, filename)
    if isinstance(exc, OSError) and "Consistency check failed" in str(exc):
        return FetchError(NETWORK_ERROR, f"{filename} arrived incomplete (truncated download)")
    return FetchError(NETWORK_ERROR, f"{filename}: {type(exc).__name__}: {exc}")


def _cached(repo: str, filename: str, revision: str, settings: HubSettings) -> Path | bool | None:
    """The cached file, False when its absence is cached, None when the cache does not know."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.file_download import _CACHED_NO_EXIST

    found = try_to_load_from_cache(repo, filename, cache_dir=settings.cache_dir, revision=revision)
    if found is _CACHED_NO_EXIST:
        return False
    return Path(found) if isinstance(found, str) else None


def _download(repo: str, filename: str, revision: str, settings: HubSettings, check_size: bool = True) -> Path:
    """hf_hub_download into the cache; with `check_size`, a dry run first so an oversize file is never fetched."""
    from huggingface_hub import hf_hub_download

    options = dict(revision=revision, cache_dir=settings.cache_dir, endpoint=settings.endpoint,
                   token=settings.token, etag_timeout=settings.timeout)
    if check_size and (failure := too_large(filename, hf_hub_download(repo, filename, dry_run=True, **options).file_size)):
        raise failure
    return Path(hf_hub_download(repo, filename, **options))


_deadline = threading.local()  # .at: monotonic time by which the file this thread fetches must be complete


@contextlib.contextmanager
def _file_deadline(filename: str, settings: HubSettings) -> Iterator[None]:
    _deadline.at, _deadline.filename = time.monotonic() + FILE_DEADLINE_FACTOR * settings.timeout, filename
    _deadline.seconds, _deadline.broken_by = FILE_DEADLINE_FACTOR * settings.timeout, None
    try:
        yield
    finally:
        _deadline.at = None


def _past_deadline() -> FetchError | None:
    at = getattr(_deadline, "at", None)
    if at is None or time.monotonic() < at:
        return None
    if (broken_by := _deadline.broken_by) is not None:  # retried until the deadline: say why it broke
        return FetchError(NETWORK_ERROR, f"{_deadline.filename}: {type(broken_by).__name__}: {broken_by} "
                                         f"(retried for {_deadline.seconds:g}s)")
    return FetchError(TIMEOUT, f"{_deadline.filename} did not arrive within {_deadline.seconds:g}s "
                               f"({FILE_DEADLINE_FACTOR} x the timeout, retries included)")


def _bounded_transport() -> Any:
    import httpx2

    class _BoundedStream(httpx2.SyncByteStream):
        """A response body that stops at MAX_FILE_BYTES bytes read and at the file's deadline."""

        def __init__(self, stream: Any, filename: str) -> None:
            self._stream, self._filename = stream, filename

        def __iter__(self) -> Iterator[bytes]:
            read = 0
            try:
                for chunk in self._stream:
                    read += len(chunk)
                    if read > MAX_FILE_BYTES:
                        raise FetchError(TOO_LARGE, f"{self._filename}: the download went past the "
                                                    f"{MAX_FILE_BYTES}-byte limit (more bytes than announced)")
                    if failure := _past_deadline():
                        raise failure
                    yield chunk
            except httpx2.TransportError as exc:
                if not isinstance(exc, httpx2.TimeoutException):
                    _deadline.broken_by = exc
                raise

        def close(self) -> None:
            self._stream.close()

    class _BoundedTransport(httpx2.HTTPTransport):
        def handle_request(self, request: Any) -> Any:
            if failure := _past_deadline():
                raise failure
            at = getattr(_deadline, "at", None)
            if at is not None:  # no single read may wait past the deadline either (a stalled answer)
                remaining = max(0.01, at - time.monotonic())
                limits = request.extensions.get("timeout") or {}
                request.extensions["timeout"] = {name: min(remaining, limits.get(name) or remaining)
                                                 for name in ("connect", "read", "write", "pool")}
            request.headers["Accept-Encoding"] = "identity"  # the byte limit counts what is stored
            response = super().handle_request(request)
            response.headers.pop("Content-Encoding", None)  # asked for none: bytes are stored as they came
            response.stream = _BoundedStream(response.stream, request.url.path.rsplit("/", 1)[-1])
            return response

    return _BoundedTransport()


def _bounded_client() -> Any:
    """huggingface_hub's default client, with the bounded transport."""
    import httpx2
    from huggingface_hub.utils._http import hf_request_event_hook

    return httpx2.Client(event_hooks={"request": [hf_request_event_hook]}, follow_redirects=True, timeout=None,
                         transport=_bounded_transport())


_install_lock = threading.Lock()
_installed = False


def _install_bounds() -> None:
    global _installed
    from huggingface_hub import set_client_factory

    with _install_lock:
        if not _installed:
            set_client_factory(_bounded_client)
            _installed = True


def _fetch_tokenizer_config(repo: str, revision: str, settings: HubSettings) -> Path:
    """Cache first when that is safe (pinned commit, or offline); otherwise ask the Hub, size-gated."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    if settings.offline or _is_commit(revision):
        cached = _cached(repo, TOKENIZER_CONFIG, revision, settings)
        if cached is False:
            raise FetchError(NOT_FOUND, f"{TOKENIZER_CONFIG} not found in the repository (cached answer)")
        if cached is not None:
            return cached
        if settings.offline:
            raise FetchError(NOT_CACHED, f"HF_HUB_OFFLINE is set and {TOKENIZER_CONFIG} is not in the cache")
    # One HEAD without retries: a quick, precise failure kind, and the size before any download.
    url = hf_hub_url(repo, TOKENIZER_CONFIG, revision=revision, endpoint=settings.endpoint)
    metadata = get_hf_file_metadata(url, token=settings.token, timeout=settings.timeout, endpoint=settings.endpoint)
    if failure := too_large(TOKENIZER_CONFIG, metadata.size):
        raise failure
    return _download(repo, TOKENIZER_CONFIG, revision, settings, check_size=False)


def _fetch_optional(repo: str, filename: str, commit: str, settings: HubSettings) -> Path | None:
    from huggingface_hub import errors

    cached = _cached(repo, filename, commit, settings)
    if cached is not None or settings.offline:
        return cached or None
    try:
        return _download(repo, filename, commit, settings)
    except errors.RemoteEntryNotFoundError:  # huggingface_hub caches the absence for this commit
        return None


def read_checkpoint_files(files: Mapping[str, Path]) -> dict[str, Any]:
    """The tokenizer config of a checkpoint's files (name -> path), after checking that each JSON
    file among them reads; raises FetchError."""
    config = read_tokenizer_config(files[TOKENIZER_CONFIG])
    if "chat_template.json" in files:
        read_json_file(files["chat_template.json"], "chat_template.json")
    return config


def _is_commit(revision: str) -> bool:
    return bool(COMMIT_SHA.fullmatch(revision))


def fetch_checkpoint(repo: str, revision: str, settings: HubSettings) -> FetchedCheckpoint:
    """Fetch one checkpoint's metadata; never raises for Hub or content problems."""
    _install_bounds()
    result = FetchedCheckpoint(repo=repo, revision=revision)
    filename = TOKENIZER_CONFIG
    try:
        with _file_deadline(filename, settings):
            config_path = _fetch_tokenizer_config(repo, revision, settings)
        result.commit = config_path.parent.name  # snapshots/<commit>/tokenizer_config.json
        result.files[TOKENIZER_CONFIG] = config_path
        for filename in OPTIONAL_FILES:
            with _file_deadline(filename, settings):
                path = _fetch_optional(repo, filename, result.commit, settings)
            if path is not None:
                result.files[filename] = path
        filename = TOKENIZER_CONFIG
        result.tokenizer_config = read_checkpoint_files(result.files)
    except Exception as exc:  # every failure is a state of this checkpoint, never a crash of the run
        failure = _classify(exc, filename)
        result.status, result.error = failure.kind, _redact(str(failure), settings)
        result.startup_error = failure.startup_error
        result.tokenizer_config = None
    return result


def fetch_many(
    checkpoints: Iterable[tuple[str, str]], settings: HubSettings, workers: int = DEFAULT_WORKERS
) -> Iterator[FetchedCheckpoint]:
    """Fetch `(repo, revision)` pairs concurrently, yielding each result as soon as it is complete.

    The workers are daemon threads: on Ctrl-C or an abandoned generator, queued checkpoints are not started
    and nothing waits for the fetches still running (each ends by its own deadline, in the background)."""
    from huggingface_hub.utils import disable_progress_bars

    pairs = list(checkpoints)
    if not pairs:
        return
    disable_progress_bars()  # one bar per small file is noise, and slow with hundreds of checkpoints
    queued: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()
    for pair in pairs:
        queued.put(pair)
    done: queue.SimpleQueue[FetchedCheckpoint] = queue.SimpleQueue()
    stopped = threading.Event()

    def work() -> None:
        while not stopped.is_set():
            try:
                repo, revision = queued.get_nowait()
            except queue.Empty:
                return
            done.put(fetch_checkpoint(repo, revision, settings))

    for _ in range(max(1, min(workers, len(pairs)))):
        threading.Thread(target=work, daemon=True, name="hub-fetch").start()
    try:
        for _ in pairs:
            yield done.get()
    finally:
        stopped.set()
