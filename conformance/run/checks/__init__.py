"""The checks: pure functions from a recorded answer (its message, stream reading, transcript) to one
`Check` each. No I/O, no server. `conformance.run.judge` runs every check that applies to a transcript.
Kinds:

* `contract`: the client contract every response must keep (stream framing, tool-call deltas,
  valid JSON arguments, no leaked template markers, stream equals non-stream, transport).
* `expectation`: the case's expected outcome for the profile (or, in natural mode, the tool call
  the prompt asks for).
* `schema`: tool arguments validated against the tool's JSON schema. A model choosing wrong
  values is not a parser failure, so a failing schema check never fails the case.
* `finding`: facts clients depend on, recorded for reports and diffs (which reasoning field the
  server uses, how tool calls stream, whether openai-python's own accumulator rebuilds the same
  message). Never fails the case.

One module per kind: `contract`, `expectations`, `findings`, `usage` and `client_keys` (expectation
checks of what clients key on), `shape` (the answer read at all); `openai_replay` feeds a stream to
openai-python for the client-replay finding.
"""
