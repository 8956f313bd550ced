"""Every recorded answer of a run through every client: the plan (which client calls read which
transcript), the replay server, the drivers, and the comparison into `ClientFinding`s."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError
from typing import Any

from conformance.clients import node_ai_sdk, py_langchain, py_litellm, py_openai
from conformance.clients.compare import differences, message_outcome, refusal_outcome, view
from conformance.clients.idioms import IDIOMS, run_idioms
from conformance.clients.jobs import APIS, CLIENT_OF, ClientName, Job, Rebuilt
from conformance.clients.record import ClientFinding, IdiomFinding
from conformance.clients.replay_server import Answer, answer_of, running
from conformance.record.case_model import is_stream, rebuilder_of
from conformance.record.transcript import Transcript
from conformance.record.wire import read_stream, response_message

CLIENTS: tuple[ClientName, ...] = tuple(APIS)
PYTHON_DRIVERS: dict[ClientName, Any] = {"openai-python": py_openai, "langchain-openai": py_langchain, "litellm": py_litellm}
VERSIONS: dict[ClientName, Callable[[], str]] = {**{name: module.version for name, module in PYTHON_DRIVERS.items()},
                                                 "ai-sdk": node_ai_sdk.version}


@dataclass
class _Planned:
    transcript: Transcript
    job: Job


def client_versions(clients: Sequence[ClientName]) -> dict[str, dict[str, str | None]]:
    """Per client, the version that will run, or why it cannot."""
    versions: dict[str, dict[str, str | None]] = {}
    for client in clients:
        try:
            versions[client] = {"version": VERSIONS[client](), "unavailable": None}
        except (PackageNotFoundError, node_ai_sdk.NodeUnavailable, OSError) as exc:
            versions[client] = {"version": None, "unavailable": str(exc) or type(exc).__name__}
    return versions


def runnable(versions: dict[str, dict[str, str | None]],
             failed: Mapping[str, str]) -> dict[str, dict[str, str | None]]:
    """`versions` with each client whose batch failed marked unavailable: it is not started again."""
    return {client: {**version, "unavailable": f"its batch failed earlier in this command: {failed[client]}"}
            if client in failed else version for client, version in versions.items()}


def replay(transcripts: Sequence[Transcript], clients: Sequence[ClientName],
           versions: dict[str, dict[str, str | None]]) -> tuple[list[ClientFinding], dict[str, str]]:
    """One finding per (transcript, client call), in transcript order, and per client whose batch failed,
    why (its calls that did not finish are `not_run` with that reason)."""
    entries: list[ClientFinding | _Planned] = []
    with running() as server:
        for transcript in transcripts:
            answer = answer_of(transcript) if transcript.endpoint == "chat" else None
            for client in clients:
                # a granular stream is read as a stream, a second turn's answer as a non-streaming one
                for api in APIS[client]["stream" if is_stream(transcript.mode) else "non-stream"]:
                    not_run = _why_not_run(transcript, answer, versions[client])
                    if not_run or answer is None:
                        entries.append(_finding(transcript, api, "not_run", reason=not_run))
                        continue
                    slot = server.register(answer)
                    job = Job(str(len(entries)), api, server.base_url(slot), transcript.request.get("model") or "model",
                              _replayed_messages(transcript), list(transcript.request.get("tools") or []),
                              transcript.request.get("tool_choice"))
                    entries.append(_Planned(transcript, job))
        planned = [entry for entry in entries if isinstance(entry, _Planned)]
        rebuilt, failed = _run_all(planned)
    return [judge(entry.transcript, entry.job.api, rebuilt[entry.job.key]) if isinstance(entry, _Planned) else entry
            for entry in entries], failed


def _replayed_messages(transcript: Transcript) -> list[Any]:
    """The messages a client replays with (the answer does not depend on them): a second turn's only up to the
    conversation's first assistant turn, since its history is in another client's shape (LangChain raised on
    openai-python's `function_call: null`)."""
    messages = list(transcript.request.get("messages") or [])
    if rebuilder_of(transcript.mode) is None:
        return messages
    first = next((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"),
                 len(messages))
    return messages[:first]


def _why_not_run(transcript: Transcript, answer: Answer | None, version: dict[str, str | None]) -> str:
    """Why a client call cannot replay this transcript ("" when it can)."""
    if version["unavailable"]:
        return f"the client cannot run here: {version['unavailable']}"
    if transcript.endpoint != "chat":
        return f"endpoint {transcript.endpoint}: the client replay covers chat completions"
    if answer is None:
        return "no answer recorded: " + (transcript.skip_reason or transcript.transport_error or "not sent")
    return ""


def _run_all(planned: Sequence[_Planned]) -> tuple[dict[str, Rebuilt | str], dict[str, str]]:
    """Each job's `Rebuilt`, or the reason it could not run; and why the Node batch failed, if it did."""
    results: dict[str, Rebuilt | str] = {}
    node_jobs = [plan.job for plan in planned if CLIENT_OF[plan.job.api] == "ai-sdk"]
    for plan in planned:
        client = CLIENT_OF[plan.job.api]
        if client != "ai-sdk":
            results[plan.job.key] = PYTHON_DRIVERS[client].run(plan.job)
    if not node_jobs:
        return results, {}
    try:
        results.update(node_ai_sdk.run_batch(node_jobs))
    except node_ai_sdk.BatchFailed as exc:
        results.update(exc.finished)
        results.update({job.key: str(exc) for job in node_jobs if job.key not in results})
        return results, {"ai-sdk": str(exc)}
    return results, {}


def judge(transcript: Transcript, api: Any, rebuilt: Rebuilt | str) -> ClientFinding:
    """What a client call made of one recorded answer."""
    if isinstance(rebuilt, str):
        return _finding(transcript, api, "not_run", reason=rebuilt)
    status = transcript.status or 0
    extra: dict[str, Any] = {"error": rebuilt.error, "finish_reason": rebuilt.finish_reason,
                             "items": rebuilt.items, "first_name_item": rebuilt.first_name_item}
    if is_stream(transcript.mode) and 200 <= status < 300:
        reading = read_stream(transcript)
        extra["server_chunks"] = len(reading.chunks)
        extra["server_first_name_chunk"] = _first_name_chunk(reading.chunks)
    rebuilt_view = view(rebuilt.message) if rebuilt.message is not None else None
    if not 200 <= status < 300:
        outcome, reason = refusal_outcome(transcript.error_body, rebuilt.error)
        return _finding(transcript, api, outcome, reason=reason, rebuilt=rebuilt_view, **extra)
    server_message = read_stream(transcript).message if is_stream(transcript.mode) else response_message(transcript)
    server_view = view(server_message) if server_message is not None else None
    if rebuilt.error is not None:
        return _finding(transcript, api, "raised", reason=rebuilt.error, server=server_view, rebuilt=rebuilt_view, **extra)
    found = differences(server_view, rebuilt_view) if server_view and rebuilt_view else []
    outcome = message_outcome(found)
    reason = "; ".join(f"{d['field']}: server {d['server']!r}, client {d['client']!r}" for d in found)[:1000]
    return _finding(transcript, api, outcome, reason=reason, server=server_view, rebuilt=rebuilt_view,
                    differences=found, **extra)


def _first_name_chunk(chunks: Sequence[dict[str, Any]]) -> int | None:
    for number, chunk in enumerate(chunks, start=1):
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            for call in (delta or {}).get("tool_calls") or []:
                if isinstance(call, dict) and (call.get("function") or {}).get("name"):
                    return number
    return None


def _finding(transcript: Transcript, api: Any, outcome: Any, **fields: Any) -> ClientFinding:
    return ClientFinding(case_id=transcript.case_id, mode=transcript.mode, profile=transcript.profile,
                         repeat=transcript.repeat, client=CLIENT_OF[api], api=api, outcome=outcome,
                         status=transcript.status, **fields)


def replay_idioms(transcripts: Sequence[Transcript], clients: Sequence[ClientName],
                  versions: dict[str, dict[str, str | None]]) -> tuple[list[IdiomFinding], dict[str, str]]:
    """Each idiom of an available client whose case was answered (non-streaming), fed that answer; and
    why the Node batch failed, if it did (the AI SDK's idioms are then left out)."""
    recorded = {t.case_id: t for t in transcripts if t.mode == "non-stream" and t.endpoint == "chat" and answer_of(t)}
    idioms = [idiom for idiom in IDIOMS if idiom.case_id in recorded and idiom.client in clients
              and not versions[idiom.client]["unavailable"]]
    if not idioms:
        return [], {}
    requests = {case: t.request for case, t in recorded.items()}
    answers = {case: answer for case, t in recorded.items() if (answer := answer_of(t)) is not None}
    failed: dict[str, str] = {}
    with running() as server:
        runs = run_idioms(server, requests, answers, [idiom for idiom in idioms if idiom.client != "ai-sdk"])
        node_idioms = [idiom for idiom in idioms if idiom.client == "ai-sdk"]
        try:
            runs += run_idioms(server, requests, answers, node_idioms)
        except node_ai_sdk.BatchFailed as exc:
            failed["ai-sdk"] = str(exc)
    findings = [IdiomFinding(run.idiom.case_id, recorded[run.idiom.case_id].profile, run.idiom.name, run.idiom.client,
                             run.surfaced, run.raised, recorded[run.idiom.case_id].status, run.sent) for run in runs]
    return findings, failed
