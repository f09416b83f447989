"""`judge-gateway up`: the vLLM servers a config's `launch` tables ask for and the gateway, started,
supervised and stopped together (plan.py: what runs where; processes.py: one supervised child;
up.py: the whole)."""

from .plan import LaunchError, ProcessPlan, UpPlan, plan_up, visible_gpus
from .processes import Child, StartFailed, alive, descendants
from .up import run_up, start_servers, stop_all

__all__ = ["Child", "LaunchError", "ProcessPlan", "StartFailed", "UpPlan", "alive", "descendants", "plan_up",
           "run_up", "start_servers", "stop_all", "visible_gpus"]
