"""Stand-in for flow_factory.rewards: only the base classes (abc.py)."""
