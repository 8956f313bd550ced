"""One module per CLI verb; each defines `register(subparsers)` (see `conformance.cli`)."""
