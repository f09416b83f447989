"""Stand-in for cosmos_rl_reward.handler: the handler base class and its registry."""
