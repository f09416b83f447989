"""Stand-in for Flow-Factory's package root (see tests/support/peers/README.md)."""
