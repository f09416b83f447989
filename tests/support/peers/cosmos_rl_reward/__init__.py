"""Stand-in for cosmos-rl's reward service package root (see tests/support/peers/README.md)."""
