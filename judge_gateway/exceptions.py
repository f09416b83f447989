"""The exception tree: every error judge-gateway raises on purpose derives from `JudgeGatewayError`,
through one of five branches that say what the caller can do about it.

    JudgeGatewayError
    ├── InvalidInput        what the caller sent or asked for cannot be used: fix the request (4xx)
    ├── ConfigurationError  a file the operator wrote (config, template, profile, spec) is wrong
    ├── Overloaded          no capacity now: the same request can succeed later (429 / 503)
    ├── Unavailable         a dependency cannot serve: a VLM backend, a worker, the store, a model
    └── ScoringFailed       one (sample, judge) cell has no trustworthy score: it is marked invalid
    (RewardAPIError, the client's error for an HTTP answer it cannot use, derives from the root.)

The concrete classes live beside the code that raises them (`MediaError` in `media/`,
`BackendFault` in `backends.py`, ...), keep their names, and keep the builtin base they always had
(`ValueError` for bad input and bad files, `RuntimeError` for capacity and dependencies), so code
that catches `ValueError` keeps working while new code can catch what it means:

    try:
        config = load_config(path)
    except judge_gateway.ConfigurationError as exc:
        ...

Two errors stay outside the tree on purpose: `workers/framing.py`'s `ProtocolError` and
`latent_worker.py`'s `LoadError` run under interpreters that cannot import the package (stdlib
only); the supervisors turn them into `WorkerError` (an `Unavailable`) before a caller sees them.

This module is on the lowest floor: it imports nothing of the package, so every module may use it.
"""

from __future__ import annotations


class JudgeGatewayError(Exception):
    """The root: catch this to catch every error judge-gateway raises on purpose."""


class InvalidInput(JudgeGatewayError, ValueError):
    """The request, medium or command-line input cannot be used as sent; the message says why."""


class ConfigurationError(JudgeGatewayError, ValueError):
    """An operator's file or setting is unusable; the message names the file or key."""


class Overloaded(JudgeGatewayError, RuntimeError):
    """No capacity now (a queue or budget is full); retrying later can succeed."""


class Unavailable(JudgeGatewayError, RuntimeError):
    """A dependency cannot serve: a VLM backend, a worker process, the store, a model that failed
    to load. Whether retrying helps depends on the subclass (`BackendFault.code`, `WorkerError.crashed`)."""


class ScoringFailed(JudgeGatewayError):
    """One (sample, judge) cell has no trustworthy score; it is reported with `valid=false`."""


__all__ = ["JudgeGatewayError", "InvalidInput", "ConfigurationError", "Overloaded", "Unavailable",
           "ScoringFailed"]
