from conformance.cli import run

run()
