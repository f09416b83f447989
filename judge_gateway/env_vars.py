"""judge-gateway's environment variables have one prefix, `JG_`.

Every variable judge-gateway reads starts with `JG_`: the client's `JG_URL` and `JG_API_KEY`, the
service's `JG_API_KEYS` and `JG_REDIS_URL` (the defaults of server.api_keys_env and
store.url_env), the vLLM launcher's `JG_VLLM_*`, the environment builder's `JG_PYTHON` and
`JG_WHEEL_CACHE`, the test command's venv paths. Four were spelled `JUDGE_GATEWAY_*` before:
`JUDGE_GATEWAY_URL`, `JUDGE_GATEWAY_API_KEY`, `JUDGE_GATEWAY_API_KEYS`, `JUDGE_GATEWAY_REDIS_URL`.
The old spelling is still read where the `JG_` one is unset, with a FutureWarning (shown by
default, once per variable and process), so a deployment that sets it keeps working while it moves.

On the lowest floor: it imports nothing of the package.
"""

from __future__ import annotations

import os
import warnings

PREFIX = "JG_"
DEPRECATED_PREFIX = "JUDGE_GATEWAY_"

_warned: set[str] = set()  # deprecated names already warned about in this process


def deprecated_name(name: str) -> str | None:
    """The old `JUDGE_GATEWAY_` spelling of a `JG_` variable (None for any other name)."""
    return DEPRECATED_PREFIX + name[len(PREFIX):] if name.startswith(PREFIX) else None


def getenv(name: str, default: str | None = None) -> str | None:
    """The variable `name`; when it is unset and `name` starts with JG_, its deprecated
    JUDGE_GATEWAY_ spelling (with a FutureWarning naming the new one); else `default`."""
    value = os.environ.get(name)
    if value is not None:
        return value
    old = deprecated_name(name)
    if old is None or (value := os.environ.get(old)) is None:
        return default
    if old not in _warned:
        _warned.add(old)
        warnings.warn(f"the environment variable {old} is deprecated: set {name} instead (judge-gateway's "
                      f"variables all start with {PREFIX})", FutureWarning, stacklevel=2)
    return value
