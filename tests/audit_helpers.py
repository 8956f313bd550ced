"""Shared test data for the audit: the real checkpoint fixtures and a generated corpus of mutated templates.

The corpus is plain data (tokenizer_config dicts); the fast tier checks hand-written expectations on some of
it, the vLLM tier (`test_template_vs_vllm.py`) checks every entry against vLLM 0.32's own code.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from pathlib import Path

from hypothesis import strategies as st

from conformance.formats.qwen3_hermes import RESPONSE_TEMPLATE_FULL

# Real checkpoint metadata (a copy of the project's shared fixtures; INDEX.txt and each SOURCE.txt say where
# every file comes from). Kept in the repository so that a fresh checkout runs the tests.
FIXTURES = Path(__file__).resolve().parent / "data" / "checkpoints"

GEMMA4 = "google/gemma-4-12B-it"

# Contract section 6: the minimal Qwen3/Hermes-style template (loads without error), as the tiny fixture ships it.
QWEN3_STYLE: dict = RESPONSE_TEMPLATE_FULL


def fixture_commit(folder: str) -> str | None:
    """The Hub commit SOURCE.txt gives for a fixture, if any."""
    source = (FIXTURES / folder / "SOURCE.txt").read_text()
    for marker in ("snapshot directory ", "hf commit that last changed the file: "):
        if marker in source:
            return source.split(marker, 1)[1].split()[0]
    return None


def fixture_tokenizer_configs() -> dict[str, dict]:
    """Repo id -> tokenizer_config.json content for every real fixture.

    Fixtures that hold only a value are wrapped: Gemma 4's response_template under `response_template`,
    a chat template (Qwen3, Llama 3.1) under `chat_template`, as the checkpoints' own files carry them.
    """
    configs = {}
    for folder in sorted(path for path in FIXTURES.iterdir() if path.is_dir()):
        repo = folder.name.replace("__", "/", 1)
        if (folder / "tokenizer_config.json").is_file():
            configs[repo] = json.loads((folder / "tokenizer_config.json").read_text())
        elif (folder / "response_template.json").is_file():
            configs[repo] = {"response_template": json.loads((folder / "response_template.json").read_text())}
        elif (folder / "chat_template.jinja").is_file():
            configs[repo] = {"chat_template": (folder / "chat_template.jinja").read_text()}
    return configs


def gemma4_template() -> dict:
    return json.loads((FIXTURES / "google__gemma-4-12B-it" / "response_template.json").read_text())


# --- mutations: each takes a template dict (a deep copy) and returns the mutated template (any JSON value) ----

Mutation = Callable[[dict], object]


def _with(path: list[str], value: object) -> Mutation:
    def mutate(template: dict) -> dict:
        target = template
        for key in path[:-1]:
            target = target.setdefault(key, {})
        target[path[-1]] = value
        return template
    return mutate


def _without(path: list[str]) -> Mutation:
    def mutate(template: dict) -> dict:
        target = template
        for key in path[:-1]:
            target = target.get(key, {})
        if isinstance(target, dict):
            target.pop(path[-1], None)
        return template
    return mutate


def _rename_field(old: str, new: str) -> Mutation:
    def mutate(template: dict) -> dict:
        fields = template["fields"]
        if old in fields:
            fields[new] = fields.pop(old)
        return template
    return mutate


def _both_anchors(template: dict) -> dict:
    template["start_anchor"], template["start_anchor_pattern"] = "<start>", "<start>"
    return template


def _no_anchor(template: dict) -> dict:
    template.pop("start_anchor", None)
    template.pop("start_anchor_pattern", None)
    return template


# Delimiter patterns for vLLM's Rust frontend, which needs every match to start with a literal prefix
# (contract: the Rust frontend refuses every request otherwise). Name -> (anchor, pattern).
DELIMITER_PATTERNS: dict[str, tuple[str, str]] = {
    "close-non-literal": ("close", "\\s*(?:<\\|im_end\\|>|<\\|endoftext\\|>)"),  # transformers' qwen3 fallback
    "open-non-literal": ("open", "\\s*<tool_call>"),
    "open-anchor-or-literal": ("open", "(?:^|<think>\\s*)"),
    "open-dot-star": ("open", ".*<x>"),
    "open-optional-newline": ("open", "\\n?<tool_call>"),
    "open-alternation": ("open", "(?:<a>|<bb>)"),
    "open-case-insensitive": ("open", "(?i)<tc>"),
    "close-lookahead": ("close", "(?=</x>)"),
    "close-backreference": ("close", "(</x>)\\1"),
    "open-counted": ("open", "<{2}x"),
    "open-class-prefix": ("open", "[ab]<x>"),
    "open-big-class-prefix": ("open", "[a-z]<x>"),
}


def _delimiter_pattern(path: list[str], anchor: str, pattern: str) -> Mutation:
    return lambda t: _with(path + [f"{anchor}_pattern"], pattern)(_without(path + [anchor])(t))


def _field_mutations(name: str) -> dict[str, Mutation]:
    path = ["fields", name]
    return {
        f"{name}-removed": _without(path),
        f"{name}-unknown-key": _with(path + ["foo"], 1),
        f"{name}-bad-open-regex": _with(path + ["open_pattern"], "(unclosed"),
        f"{name}-bad-close-regex": _with(path + ["close_pattern"], "[z-a]"),
        f"{name}-open-pattern-not-string": _with(path + ["open_pattern"], 7),
        f"{name}-named-group-no-transform": lambda t: _without(path + ["transform"])(
            _without(path + ["open"])(_with(path + ["open_pattern"], "<x (?P<n>\\w+)>")(t))),
        f"{name}-join-without-repeats": lambda t: _without(path + ["repeats"])(_with(path + ["join"], "\n")(t)),
        f"{name}-join-not-string": lambda t: _with(path + ["repeats"], True)(_with(path + ["join"], 3)(t)),
        f"{name}-join-with-repeats": lambda t: _with(path + ["repeats"], True)(_with(path + ["join"], "")(t)),
        f"{name}-content-json": _with(path + ["content"], "json"),
        f"{name}-content-yaml": _with(path + ["content"], "yaml"),
        f"{name}-content-list": _with(path + ["content"], ["text"]),
        f"{name}-transform": _with(path + ["transform"], {"value": "{content}"}),
        f"{name}-transform-interpolated": _with(path + ["transform"], {"name": "call {name}"}),
        f"{name}-transform-each-no-transform": lambda t: _without(path + ["transform"])(_with(path + ["transform_each"], True)(t)),
        f"{name}-transform-each-not-bool": _with(path + ["transform_each"], "yes"),
        f"{name}-open-and-open-pattern": lambda t: _with(path + ["open"], "<a>")(_with(path + ["open_pattern"], "<a>")(t)),
        f"{name}-open-empty-string": _with(path + ["open"], ""),
        f"{name}-open-empty-list": _with(path + ["open"], []),
        f"{name}-open-list-with-number": _with(path + ["open"], ["<a>", 1]),
        f"{name}-open-number": _with(path + ["open"], 5),
        f"{name}-implicit": lambda t: _without(path + ["open_pattern"])(_without(path + ["open"])(t)),
        f"{name}-not-a-dict": _with(path, "text"),
        **{f"{name}-{kind}": _delimiter_pattern(path, anchor, pattern)
           for kind, (anchor, pattern) in DELIMITER_PATTERNS.items()},
    }


TOP_LEVEL_MUTATIONS: dict[str, Mutation] = {
    "unknown-top-level-key": _with(["extra"], True),
    "version-2": _with(["version"], 2),
    "version-string": _with(["version"], "1"),
    "version-float-1": _with(["version"], 1.0),
    "both-anchors": _both_anchors,
    "no-anchor": _no_anchor,
    "anchor-pattern-only": lambda t: _with(["start_anchor_pattern"], "<\\|im_start\\|>assistant\\n?")(_no_anchor(t)),
    "anchor-bad-pattern": lambda t: _with(["start_anchor_pattern"], "(?P<x")(_no_anchor(t)),
    "anchor-empty-list": _with(["start_anchor"], []),
    "anchor-empty-string": _with(["start_anchor"], ""),
    "anchor-dict": _with(["start_anchor"], {"a": 1}),
    "defaults-list": _with(["defaults"], ["role"]),
    "defaults-tool-calls": _with(["defaults", "tool_calls"], []),
    "fields-empty": _with(["fields"], {}),
    "fields-list": _with(["fields"], ["content"]),
    "fields-missing": _without(["fields"]),
    "field-citations": _with(["fields", "citations"], {"open": "<cite>", "close": "</cite>"}),
    "thinking-as-reasoning_content": _rename_field("thinking", "reasoning_content"),
    "two-implicit-fields": _with(["fields", "extra_sink"], {}),
    "template-string": lambda t: json.dumps(t),
    "template-list": lambda t: [t],
    "template-null": lambda t: None,
}


def _all_mutations() -> dict[str, Mutation]:
    mutations = dict(TOP_LEVEL_MUTATIONS)
    for name in ("thinking", "content", "tool_calls"):
        mutations.update(_field_mutations(name))
    return mutations


MUTATIONS = _all_mutations()
BASES = {"qwen3-style": lambda: copy.deepcopy(QWEN3_STYLE), "gemma4": gemma4_template}


def mutation_corpus(random_cases: int = 300, seed: int = 20261130) -> list[tuple[str, dict]]:
    """(case id, tokenizer_config) for every base x single mutation, then random stacks of 2-4 mutations."""
    corpus = []
    for base_name, base in BASES.items():
        corpus.append((base_name, {"response_template": base()}))
        for mutation_name, mutate in MUTATIONS.items():
            corpus.append((f"{base_name}/{mutation_name}", {"response_template": mutate(base())}))
    rng = random.Random(seed)
    names = sorted(MUTATIONS)
    for index in range(random_cases):
        base_name = rng.choice(sorted(BASES))
        chosen = rng.sample(names, rng.randint(2, 4))
        template: object = BASES[base_name]()
        for name in chosen:
            if not isinstance(template, dict) or not isinstance(template.get("fields"), dict):
                break
            try:
                template = MUTATIONS[name](copy.deepcopy(template))
            except (AttributeError, TypeError):  # an earlier mutation left no dict where this one edits
                continue
        corpus.append((f"random-{index}/{base_name}/{'+'.join(chosen)}", {"response_template": template}))
    corpus.append(("no-metadata", {"chat_template": "{{ messages }}"}))
    corpus.append(("legacy-schema-only", {"response_schema": {"type": "object"}}))
    corpus.append(("legacy-and-template", {"response_schema": {"type": "object"}, "response_template": copy.deepcopy(QWEN3_STYLE)}))
    return corpus


# Hypothesis: templates (and values that are not) the corpus did not think of.
_TEXTS = st.sampled_from(["<a>", "</a>", "<think>", "(x", "(?P<n>\\w+)", "text", "json", "yaml", "xml-inline", "",
                          "{content}", "call {name}", "\n", "role"])
_VALUES = st.one_of(
    _TEXTS, st.booleans(), st.integers(0, 3), st.none(),
    st.lists(st.one_of(_TEXTS, st.integers(0, 1)), max_size=3),
    st.dictionaries(st.sampled_from(["type", "function", "name", "arguments"]), _TEXTS, max_size=3),
)
_FIELD = st.dictionaries(
    st.sampled_from(["open", "open_pattern", "close", "close_pattern", "content", "content_args", "repeats", "join",
                     "optional", "transform", "transform_each", "foo"]),
    _VALUES, max_size=5,
)
_TEMPLATE = st.fixed_dictionaries({}, optional={
    "version": st.sampled_from([1, 2, "1", 1.0, True]),
    "defaults": st.sampled_from([{"role": "assistant"}, [], {"tool_calls": []}]),
    "fields": st.dictionaries(st.sampled_from(["thinking", "content", "tool_calls", "reasoning_content", "citations"]),
                              _FIELD, max_size=4),
    "start_anchor": _VALUES,
    "start_anchor_pattern": _VALUES,
    "extra": st.just(1),
})
GENERATED_TEMPLATES = st.one_of(_TEMPLATE, _VALUES)


def serve_fixtures(hub) -> dict[str, str]:
    """Add every real fixture to a `tests.hub_server.HubServer` under its repo id, at the commit SOURCE.txt
    gives (or a made-up one). Returns repo id -> commit."""
    commits = {}
    for repo, tokenizer_config in fixture_tokenizer_configs().items():
        files = {"tokenizer_config.json": json.dumps(tokenizer_config, indent=2)}
        folder = FIXTURES / repo.replace("/", "__", 1)
        if (folder / "chat_template.jinja").is_file():
            files["chat_template.jinja"] = (folder / "chat_template.jinja").read_text()
        options = {"commit": commit} if (commit := fixture_commit(folder.name)) else {}
        commits[repo] = hub.add_repo(repo, files, **options).commit
    return commits
