"""`conformance serve --profile NAME --model DIR_OR_REPO [--port N] [-- EXTRA]`: run a profile's real server."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from conformance.commands import add_verb, timeout_problem
from conformance.util import exit_codes

DESCRIPTION = """\
Start the real server of one profile (its record in conformance/servers/profiles.py: for vLLM,
python -m vllm.entrypoints.openai.api_server), wait until it is healthy, print its address, and keep
it running until Ctrl-C (or SIGTERM), then stop its whole process tree. The vLLM profiles also get
--structured-outputs-config '{"enable_in_reasoning": true}' (so raw outputs can be forced),
--max-model-len 2048 --enforce-eager --dtype float32 and VLLM_CPU_KVCACHE_SPACE=1. Arguments after
`--` go to the server unchanged.

profiles:
{profiles}

example:
  conformance fixture build /tmp/tiny && conformance serve --profile hf --model /tmp/tiny
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    from conformance.servers.profiles import PROFILES, launchable_profiles

    listing = "\n".join(f"  {name:<7} {' '.join(PROFILES[name].server_args)}" for name in launchable_profiles())
    parser = add_verb(subparsers, "serve", "run a profile's real server (vLLM with its parser flags)",
                      DESCRIPTION.replace("{profiles}", listing))
    parser.add_argument("--profile", required=True, choices=sorted(launchable_profiles()),
                        help="the server and its configuration")
    parser.add_argument("--model", required=True, help="checkpoint directory or Hugging Face repo id")
    parser.add_argument("--port", type=int, help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--log-dir", type=Path, help="where the server log goes (default: a temporary directory)")
    parser.add_argument(
        "--python", type=Path, help="interpreter that has the server installed (vLLM; default: the one running this command)"
    )
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait until healthy (default: 300)")
    parser.add_argument("extra_args", nargs="*", metavar="EXTRA", help="after `--`: extra server arguments")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from conformance.servers.launch import ServerStartError, launch

    if problem := timeout_problem(args.timeout):
        print(f"conformance serve: error: {problem}", file=sys.stderr)
        return exit_codes.ERROR

    # Ctrl-C (taken by cli.main) and SIGTERM both unwind through `launch`, which stops the server's tree.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    from conformance.servers.profiles import PROFILES

    print(f"starting {PROFILES[args.profile].server_name} ({args.profile} profile) for {args.model} ...", file=sys.stderr)
    try:
        with launch(
            args.profile, args.model, port=args.port, extra_args=args.extra_args, log_dir=args.log_dir,
            timeout=args.timeout, python=args.python,
        ) as server:  # fmt: skip
            print(f"{server.profile.server_name} {server.version} ({server.profile.name} profile) healthy after "
                  f"{server.startup_seconds:.1f} s")
            print(f"base_url: {server.base_url}")
            print(f"model: {server.model}")
            print(f"log: {server.log_path}")
            print("press Ctrl-C to stop", flush=True)
            while server.process.poll() is None:
                time.sleep(1)
            print(f"error: the server exited with code {server.process.returncode} (log: {server.log_path})",
                  file=sys.stderr)  # fmt: skip
            return exit_codes.ERROR
    except ServerStartError as error:
        print(f"error: {error}", file=sys.stderr)
        return exit_codes.ERROR
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return exit_codes.OK

