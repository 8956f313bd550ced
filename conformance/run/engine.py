"""The one engine behind `conformance run`, `conformance recheck` and the pytest plugin.

`run()` sends every case (both modes unless the case says otherwise, `repeat` times) with bounded
concurrency, appends each transcript to `transcripts.jsonl` as soon as its request finishes, judges
a case as soon as all its modes are in and appends the results to `results.jsonl`. `recheck()`
judges a recorded transcripts file again with no server.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from conformance.formats.markers import DEFAULT_MARKERS
from conformance.formats.recorded_format import needs_record, write_recorded_format
from conformance.formats.registry import format_named
from conformance.record.case_model import (
    MODES,
    ONE_TOKEN_STREAM,
    STREAM_INTERVAL_FIELD,
    Case,
    Mode,
    granular_mode,
    is_stream,
    mode_order,
    rebuilder_of,
    second_turn_mode,
    tokens_per_delta,
)
from conformance.record.outcomes import Check
from conformance.record.recording import make_header
from conformance.record.results import RESULTS_FILE, CaseResult, Summary, make_result, summarize
from conformance.record.stamp import make_stamp
from conformance.record.transcript import TRANSCRIPTS_FILE, JsonLinesWriter, Transcript, group_by_key
from conformance.run.checks.granularity import judged_merged_stream, judged_with_stream_bug, most_tokens_in_a_delta
from conformance.run.checks.shape import shape_failure, shape_problems
from conformance.run.driver import DEFAULT_CONCURRENCY, Target, fetch_server_version, make_clients, request_body, send
from conformance.run.forcing_plan import NotSent, forcing_for, format_of, resolve_forcing, verify_within
from conformance.run.judge import judge
from conformance.run.second_turn import (
    TurnRebuilder,
    TurnSender,
    first_turn_job,
    judge_second_turn,
    send_second_turn,
    turn2_case,
    turn2_not_sent,
)
from conformance.servers.forcing import VERIFIED_ENDPOINTS, ServerTokenizer
from conformance.servers.profile import STREAM_INTERVAL_WORDS
from conformance.servers.profiles import PROFILES, profile_record
from conformance.util.progress import Progress


@dataclass
class RunOutput:
    results: list[CaseResult]
    summary: Summary
    stamp: dict[str, Any]
    transcripts: list[Transcript]  # in the order they were recorded (as in transcripts.jsonl)


def request_count(cases: Sequence[Case], repeat: int = 1, granularities: Sequence[str] = (),
                  rebuilders: Collection[str] = ()) -> int:
    """How many requests (and so results) a run of `cases` makes."""
    return sum(len(case_modes(case, granularities)) + len(second_turn_modes(case, rebuilders))
               for case in cases) * repeat


def second_turn_modes(case: Case, rebuilders: Collection[str]) -> tuple[Mode, ...]:
    """The second turns a case is sent as, one per rebuilder (`conformance.run.second_turn`): a chat case
    with a second turn, forced (a natural turn 1 has no known calls to answer)."""
    if case.written_turn is None or case.endpoint != "chat" or case.force is None:
        return ()
    return tuple(second_turn_mode(name) for name in rebuilders)


def case_modes(case: Case, granularities: Sequence[str] = ()) -> tuple[Mode, ...]:
    """The modes a case is sent in: non-stream first (a stream is judged against it), then the stream,
    then, for a forced chat case that streams, the stream at each of `granularities` (tokens per delta,
    `conformance.record.case_model.GRANULARITIES`; each judged against the one-token stream)."""
    wanted = tuple(case.modes or MODES)
    modes = tuple(mode for mode in MODES if mode in wanted)
    if "stream" in modes and case.force is not None and case.endpoint == "chat":
        modes += tuple(granular_mode(granularity) for granularity in granularities)
    return modes


def known_profiles(cases: Iterable[Case]) -> set[str]:
    """Profiles a run can judge: the profile records (conformance.servers.profiles) and every case expectation's."""
    return set(PROFILES) | {profile for case in cases for profile in case.expect}


def implied_skip_kinds(target: Target, natural: bool) -> set[str]:
    """Skip kinds the run's own choices allow: `--forcing off` skips the forced cases, natural mode
    counts model misses apart."""
    return {kind for kind, chosen in (("forcing_off", target.cannot_force_kind == "forcing_off"),
                                      ("model_miss", natural)) if chosen}


def granularity_not_asked(mode: Mode, target: Target) -> NotSent | None:
    """The skip of a granular stream on a server that cannot be asked for several tokens per delta
    (None: it can, or `mode` is not granular)."""
    record = profile_record(target.profile)
    if tokens_per_delta(mode) is None or record.stream_interval_per_request:
        return None
    return NotSent("granularity_not_asked", f"{record.server_name} cannot be asked per request for several tokens "
                                            f"per stream delta: it {STREAM_INTERVAL_WORDS[record.stream_interval]} "
                                            f"(`{STREAM_INTERVAL_FIELD}`)")


def select_cases(cases: Iterable[Case], ids: Sequence[str] = (), features: Sequence[str] = ()) -> list[Case]:
    """Cases whose id is in `ids` (if given) and that carry one of `features` (if given)."""
    cases = list(cases)
    unknown = sorted(set(ids) - {case.id for case in cases})
    if unknown:
        raise ValueError(f"unknown case id(s): {', '.join(unknown)}")
    return [
        case
        for case in cases
        if (not ids or case.id in ids) and (not features or set(features) & set(case.features or ()))
    ]


def judge_group(case: Case, by_mode: dict[str, Transcript], markers: Sequence[str],
                allowed_skips: Collection[str] = ()) -> list[CaseResult]:
    """Results for one (case, profile, repeat): each mode judged, the stream against the non-stream;
    a skip of a kind in `allowed_skips` (or declared by the case) is allowed."""
    results = []
    for mode, transcript in sorted(by_mode.items(), key=lambda item: mode_order(item[0])):
        second_turn = rebuilder_of(mode) is not None  # judged on its own (its first turn is another request)
        companion = by_mode.get("non-stream") if is_stream(mode) and not second_turn else None
        one_token_stream = by_mode.get("stream") if tokens_per_delta(mode) is not None else None
        try:
            if second_turn:
                checks = judge_second_turn(case, transcript, markers)
            else:
                checks = judge(case, transcript, companion=companion, markers=markers, one_token_stream=one_token_stream)
            form = format_named(format_of(case))
            if bug := form.stream_bug(transcript.profile, case.id, mode):
                checks = judged_with_stream_bug(checks, bug)
            elif mode == ONE_TOKEN_STREAM and (most := most_tokens_in_a_delta(transcript)) > 1 and (
                    bug := form.stream_bug(transcript.profile, case.id, None)):
                checks = judged_merged_stream(checks, bug, most)
        except Exception as exc:  # must not stop the run: a malformed answer fails, a bug of ours is an error
            checks = [_unreadable(transcript, companion, exc)]
        results.append(make_result(case, transcript, checks, allowed_skips))
    return results


def _unreadable(transcript: Transcript, companion: Transcript | None, exc: Exception) -> Check:
    """Why judging raised: JSON of the wrong shape (the server's fault, a contract `fail`), else a
    bug of ours (`error`)."""
    problems = shape_problems(transcript)
    if not problems and companion is not None:
        problems = [f"the non-streaming answer it is compared with: {p}" for p in shape_problems(companion)]
    if problems:
        return shape_failure(problems)
    return Check("judge", "error", reason=f"internal error while judging: {type(exc).__name__}: {exc}")


def _not_sent(case: Case, target: Target, mode: Mode, repeat: int, why: NotSent,
              forcing: dict[str, Any] | None) -> Transcript:
    """The transcript of a request not sent: a skip, or an error recorded with the request it stands for."""
    if why.kind is not None:
        return Transcript(case.id, mode, target.profile, case.endpoint, target.stamp(), {}, repeat=repeat,
                          skip_reason=why.reason, skip_kind=why.kind)
    return Transcript(case.id, mode, target.profile, case.endpoint, target.stamp(),
                      request_body(case, mode, target.model, forcing), forced=forcing is not None,
                      forced_text=case.force if forcing is not None else None, repeat=repeat,
                      transport_error=why.reason)


def _progress_line(result: CaseResult) -> str:
    """One result as a log line: profile, case[mode], outcome, and why when it is not a pass."""
    reason = f" ({result.reason[:120]})" if result.reason and result.outcome != "pass" else ""
    return f"{result.profile} {result.name}: {result.outcome}{reason}"


async def run_async(
    cases: Sequence[Case],
    target: Target,
    out_dir: Path | None,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    repeat: int = 1,
    natural: bool = False,
    markers: Sequence[str] = DEFAULT_MARKERS,
    progress: bool | Progress = False,
    allowed_skips: Collection[str] = (),
    granularities: Sequence[str] = (),
    rebuilders: Mapping[str, TurnRebuilder] | None = None,
) -> RunOutput:
    """Send `cases` to `target` (see the module docstring); `granularities` are the tokens per delta each
    forced chat stream is also asked for, `rebuilders` the clients that send a case's second turn back
    (none of either in natural mode: natural outputs differ between requests)."""
    rebuilders = {} if natural or rebuilders is None else dict(rebuilders)
    if natural:
        granularities = ()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    allowed_skips = frozenset(allowed_skips) | implied_skip_kinds(target, natural)
    async with make_clients(target) as clients:
        if target.version is None:
            record = profile_record(target.profile)
            target = replace(target, version=await fetch_server_version(
                clients, target, record.version_probe, record.runtime))
        target = await resolve_forcing(target, cases, natural)
        writers = None
        if out_dir is not None:
            writers = (JsonLinesWriter(out_dir / TRANSCRIPTS_FILE), JsonLinesWriter(out_dir / RESULTS_FILE))
            if needs_record(form := format_named(target.format)):  # only this process knows it: kept for recheck
                write_recorded_format(out_dir, form)
            header = make_header("transcripts", cases=cases, markers=markers, server=asdict(target.stamp()),
                                 created_at=started)
            for writer, file in zip(writers, ("transcripts", "results")):
                writer.write({**header, "file": file})  # one header made: its case digest is the costly part
        semaphore = asyncio.Semaphore(max(1, concurrency))
        results: list[CaseResult] = []
        transcripts: list[Transcript] = []
        # True: a bar of its own; a Progress: one that several runs share (its owner closes it)
        own_bar = progress is True
        bar = (Progress(request_count(cases, repeat, granularities, rebuilders), "conformance") if own_bar
               else (progress or None))
        method = profile_record(target.profile).forcing
        # one per run, made at the first forced answer (a profile that cannot force has none)
        tokenizer = functools.cache(lambda: method.tokenizer(target.root_url, target.model, target.api_key,
                                                             target.timeout))
        # the server's own chat rendering, for second turns (made at the first one)
        renderer = functools.cache(lambda: ServerTokenizer(target.root_url, target.model, target.api_key,
                                                           target.timeout))

        async def one_request(case: Case, mode: Mode, repeat_index: int, forcing: dict[str, Any] | None,
                              not_sent: NotSent | None) -> Transcript:
            """Send (in a slot), verify a forced answer (the slot freed: its requests to the tokenizer
            need none, and holding it left fewer streams in flight, which cost CPU), then record the
            transcript at once: a run that is interrupted or killed keeps every answer that came back."""
            not_sent = not_sent or granularity_not_asked(mode, target)
            if not_sent:
                transcript = _not_sent(case, target, mode, repeat_index, not_sent, forcing)
            else:
                resends = 0
                while True:
                    async with semaphore:
                        transcript = await send(clients, target, case, mode, forcing=forcing, natural=natural,
                                                repeat=repeat_index)
                    # a merged one-token stream is sent again: the reference of every granular stream of the case
                    merged = (mode == ONE_TOKEN_STREAM and forcing is not None and transcript.answered
                              and most_tokens_in_a_delta(transcript) > 1)
                    if not merged or resends == MERGED_STREAM_RESENDS:
                        break
                    resends += 1
                transcript.merged_resends = resends
                if forcing is not None and transcript.status == 200 and case.endpoint in VERIFIED_ENDPOINTS:
                    # tokenizer(): a server's is made here, without I/O; a checkpoint's by request_fields, in a thread
                    transcript.forcing_problems = await verify_within(
                        target.timeout, method.verify(tokenizer(), case, transcript, format_named(target.format).marker_tokens))
            transcripts.append(transcript)
            if writers:
                writers[0].write(transcript.to_dict())
            return transcript

        async def one_case(case: Case, repeat_index: int) -> None:
            modes = case_modes(case, granularities)
            forcing, not_sent = await forcing_for(case, target, natural, tokenizer)  # the same for every mode
            recorded = await asyncio.gather(*(one_request(case, mode, repeat_index, forcing, not_sent)
                                              for mode in modes))
            record_results(judge_group(case, dict(zip(modes, recorded)), markers, allowed_skips))
            if second_turn_modes(case, rebuilders):
                await second_turns(case, repeat_index, dict(zip(modes, recorded)).get("non-stream"), not_sent)

        def record_results(judged: list[CaseResult]) -> None:
            results.extend(judged)
            if writers:
                writers[1].write_all(result.to_dict() for result in judged)  # one flush for the case's modes
            if bar is not None:
                for result in judged:
                    bar.advance(f"{result.name} {result.outcome}", _progress_line(result))

        async def second_turns(case: Case, repeat_index: int, first: Transcript | None,
                               first_not_sent: NotSent | None) -> None:
            """Each rebuilder's turn 2 after the case's non-streaming turn 1: rebuilt (a client library in a
            thread), sent forced, the server's renderings of its prompt recorded, judged."""
            job = first_turn_job(case, first)
            turn2 = turn2_case(case, case.request)
            not_sent = first_not_sent
            if not_sent is None and turn2.force is None:  # the format cannot express it: the reference says why
                not_sent = NotSent("declared", turn2.reference.skip if turn2.reference and turn2.reference.skip
                                   else "the second turn has no forced text in this format")
            if not_sent is None and isinstance(job, str):
                not_sent = NotSent("first_turn_unusable", job)
            sender = TurnSender(clients, target, semaphore,
                                lambda sent: forcing_for(sent, target, natural, tokenizer),  # keyed on its prompt
                                renderer, lambda sent, transcript: verify_within(
                                    target.timeout,
                                    method.verify(tokenizer(), sent, transcript, format_named(target.format).marker_tokens)))

            async def one(name: str, rebuild: TurnRebuilder) -> Transcript:
                if not_sent is not None:  # set whenever there is no job
                    transcript = turn2_not_sent(case, target, second_turn_mode(name), repeat_index, not_sent.kind,
                                                not_sent.reason)
                else:
                    assert not isinstance(job, str)
                    transcript = await send_second_turn(sender, case, job, name, rebuild, repeat_index)
                transcripts.append(transcript)  # recorded at once: an interrupted run keeps it
                if writers:
                    writers[0].write(transcript.to_dict())
                return transcript

            recorded = await asyncio.gather(*(one(name, rebuild) for name, rebuild in rebuilders.items()))
            record_results(judge_group(case, {t.mode: t for t in recorded}, markers, allowed_skips))

        # Cases with a second turn first: their turn 2 (a client library, one rebuilder at a time) then runs
        # beside the other cases' requests instead of after all of them (measured: an 11 s tail of a gate's 57 s).
        ordered = sorted(cases, key=lambda case: not second_turn_modes(case, rebuilders))
        tasks = [asyncio.ensure_future(one_case(case, r)) for r in range(repeat) for case in ordered]
        try:
            await asyncio.gather(*tasks)
        finally:  # on a failure (say, a full disk), stop the other requests before closing what they write to
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if own_bar:
                bar.close()
            if tokenizer.cache_info().currsize:  # made at the first forced answer
                tokenizer().close()
            if renderer.cache_info().currsize:
                renderer().close()
            if writers:
                for writer in writers:
                    writer.close()
    stamp = make_stamp(target.stamp().__dict__, recorded_at=started)
    return RunOutput(results, summarize(results), stamp, transcripts)


# How many times a one-token stream that came merged is sent again (busy servers group tokens a slow reader
# has not taken: under a gate's load on 2 cores, a few streams in a run; the next answer is usually one token
# per delta). Still merged after that: judged as it came (a declared stream bug of the case then applies).
MERGED_STREAM_RESENDS = 2


# Allocations between two young-generation collections while a run lasts (CPython's default: 700).
# Judging builds and drops SDK objects by the thousand: at 700 the collector ran about thirty times
# per run of the default set and its middle generation twice, at 5000 four times and never.
RUN_YOUNG_THRESHOLD = 5000


@contextlib.contextmanager
def collector_tuned_for_a_run() -> Iterator[None]:
    """Keep what existed before the run (imported modules, SDK classes: most of the heap) out of the
    cyclic garbage collector's full collections while the run lasts (one full pass over that heap
    cost about 0.16 s of CPU, every other run of the default set), and collect the young generation
    less often (RUN_YOUNG_THRESHOLD). Both are handed back after: `gc.unfreeze`, the thresholds."""
    thresholds = gc.get_threshold()
    gc.freeze()
    if thresholds[0]:  # 0: the caller turned automatic collection off; it stays off
        gc.set_threshold(max(thresholds[0], RUN_YOUNG_THRESHOLD), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def run(cases: Sequence[Case], target: Target, out_dir: Path | None, **options: Any) -> RunOutput:
    """Synchronous entry point (see `run_async` for the options)."""
    outputs: list[RunOutput] = []

    async def main() -> None:  # not returned by the task: asyncio.run (3.11) formats a whole repr of it
        outputs.append(await run_async(cases, target, out_dir, **options))

    with collector_tuned_for_a_run():
        asyncio.run(main())
    return outputs[0]


def recheck(
    transcripts: Sequence[Transcript],
    cases: Sequence[Case],
    *,
    markers: Sequence[str] = DEFAULT_MARKERS,
    allowed_skips: Collection[str] = (),
) -> list[CaseResult]:
    """Judge recorded transcripts again with the given case definitions; no server involved.
    A transcript whose case is no longer defined, or whose recorded request is not what the case
    asks for today (its request or forced output changed since), gets an `error` result saying so."""
    by_id = {case.id: case for case in cases}
    # the recorded run's own choices: `forcing_off` skips exist only under --forcing off
    allowed_skips = {*allowed_skips, "forcing_off", *(["model_miss"] if any(t.natural for t in transcripts) else [])}
    results: list[CaseResult] = []
    for (case_id, profile, repeat), by_mode in group_by_key(transcripts).items():
        case = by_id.get(case_id)
        stale = {mode: _recording_mismatch(case, t) for mode, t in by_mode.items()}
        for mode, reason in stale.items():
            if reason:
                check = Check("recording", "error", reason=reason)
                results.append(CaseResult(case_id, mode, profile, "error", reason, repeat, checks=[check]))
        current = {mode: t for mode, t in by_mode.items() if not stale[mode]}
        if current:
            results.extend(judge_group(case, current, markers, allowed_skips))
    return results


def _recording_mismatch(case: Case | None, transcript: Transcript) -> str | None:
    """Why a recorded transcript cannot be judged against `case` (None: it can)."""
    if case is None:
        return f"case {transcript.case_id!r} is not in the case set"
    if transcript.skip_reason:
        return None
    if rebuilder_of(transcript.mode) is not None:  # its body is the client's: only the forced text is the case's
        if case.second_turn is None:
            return f"case {case.id!r} no longer has a second turn; it was recorded with one"
        if transcript.forced and transcript.forced_text != case.second_turn.force:
            return f"case {case.id!r} changed since it was recorded: the second turn's forced output differs"
        return None
    if transcript.forced and case.force is None:
        return f"case {case.id!r} no longer forces an output; it was recorded with one"
    if not (transcript.forced or transcript.natural) and case.force is not None:
        return f"case {case.id!r} now forces an output; it was recorded without one"
    method = profile_record(transcript.profile).forcing
    # The forcing fields are the recorded ones (a method naming tokens needs the server to make
    # them): the forced text read back from them must be the case's, the rest of the body today's.
    forcing = {key: transcript.request[key] for key in method.request_keys if key in transcript.request}
    changed_force = transcript.forced and transcript.forced_text != case.force
    wanted = request_body(case, transcript.mode, transcript.request.get("model", ""),
                          forcing if transcript.forced else None)
    differing = sorted(
        key for key in wanted.keys() | transcript.request.keys() if wanted.get(key) != transcript.request.get(key)
    ) + (["the forced output"] if changed_force else [])
    if differing:
        return f"case {case.id!r} changed since it was recorded: the request differs in {', '.join(differing)}"
    return None
