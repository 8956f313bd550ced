"""The contract document (docs/vllm-0.32-contract.md) and the cases' references into it (fast tier)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from conformance.suite import contract_document as contract
from conformance.suite.cases import check_suite, load_suite
from conformance.util import exit_codes
from tests.contract_doc import citations, read, sections_naming

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCUMENT = read(REPO_ROOT / "docs" / "vllm-0.32-contract.md")


def test_every_shipped_case_is_cited_and_every_citation_exists() -> None:
    shipped = {case.id for case in load_suite()}
    cited = set(sections_naming(DOCUMENT))
    assert cited - shipped == set(), "the document cites cases that are not shipped"
    assert shipped - cited == set(), "shipped cases the document does not cite"


def test_every_cited_test_exists_and_runs_against_real_vllm() -> None:
    cited = {test for named in citations(DOCUMENT).values() for test in named["tests"]}
    files = sorted({node.partition("::")[0] for node in cited})
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "vllm", *files],
                               capture_output=True, text=True, cwd=REPO_ROOT).stdout.splitlines()
    real_server_tests = {line.partition("[")[0] for line in collected if "::" in line}
    assert cited and cited <= real_server_tests, cited - real_server_tests


def test_every_statement_cites_a_case_or_a_real_server_test() -> None:
    body = DOCUMENT[DOCUMENT.index('<a id="1"></a>'):]
    bullets: list[str] = []
    for line in body.splitlines():
        if line.startswith("* "):
            bullets.append(line)
        elif line.startswith("  ") and bullets:
            bullets[-1] += " " + line.strip()
    assert len(bullets) > 50
    for bullet in bullets:
        assert "(cases: " in bullet or "(tests: " in bullet, f"no citation: {bullet}"


def test_a_cases_references_are_the_sections_that_cite_it() -> None:
    naming = sections_naming(DOCUMENT)
    for case in load_suite():
        assert set(case.references) == {f"contract {section}" for section in naming[case.id]}, case.id


def test_unresolved_references_are_errors_naming_file_line_case_and_field(tmp_path: Path) -> None:
    (tmp_path / "refs.yaml").write_text(textwrap.dedent("""\
        cases:
          - id: with-references
            description: A case whose references point at sections that may or may not exist.
            features: [content]
            references:
              - contract 3.3
              - contract 9.9
              - observed-outcomes content-only
              - https://example.org/spec#section
            request:
              messages: [{role: user, content: hi}]
            force: "hi"
            expect:
              hf: {message: {content: "hi"}, finish_reason: stop}
        """))
    completed = subprocess.run([sys.executable, "-m", "conformance", "cases", "check", str(tmp_path)],
                               capture_output=True, text=True)
    assert completed.returncode == exit_codes.FAILED, completed.stdout + completed.stderr
    errors = [line for line in completed.stderr.splitlines() if line.startswith("error:")]
    where = f"{tmp_path / 'refs.yaml'}"
    assert errors == [
        f"error: {where}:7: case #0 'with-references': field references[1]: vllm-0.32-contract.md has no section "
        f"9.9 (its sections: {', '.join(sorted(contract.contract_sections(), key=lambda n: [int(p) for p in n.split('.')]))})",
        f"error: {where}:8: case #0 'with-references': field references[2]: reference 'observed-outcomes "
        "content-only' is neither 'contract N.M' (a section of vllm-0.32-contract.md) nor a web address",
    ]


def test_an_unreadable_contract_document_is_reported(tmp_path: Path) -> None:
    try:
        contract.contract_sections(tmp_path)
    except IsADirectoryError:
        pass
    else:
        raise AssertionError("reading a directory as the document must fail")


def test_an_unreadable_feature_registry_and_a_file_for_a_directory(tmp_path: Path) -> None:
    (tmp_path / "features.txt").mkdir()
    (tmp_path / "a.yaml").write_text("cases: []\n")
    check = check_suite(tmp_path)
    assert [str(issue) for issue in check.errors][:1] == [
        f"error: {tmp_path / 'features.txt'}: cannot read the feature registry: "
        f"[Errno 21] Is a directory: '{tmp_path / 'features.txt'}'"]
    completed = subprocess.run([sys.executable, "-m", "conformance", "cases", "check", str(tmp_path / "a.yaml")],
                               capture_output=True, text=True)
    assert completed.returncode == exit_codes.ERROR and "not a directory" in completed.stderr
    assert "Traceback" not in completed.stderr
