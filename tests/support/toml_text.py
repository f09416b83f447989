"""Config dicts as TOML text, so a test can hand a command the config it built."""

from __future__ import annotations


def to_toml(data: dict, prefix: str = "") -> str:
    """A config dict as TOML (tables, strings, numbers, booleans, lists of those), so a test can
    hand `judge-gateway serve --config` the config it built."""
    import json

    def value(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + "}"
        raise TypeError(f"no TOML for {type(v).__name__}")

    scalars = [f"{json.dumps(k)} = {value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    out = ([f"[{prefix}]"] if prefix and scalars else []) + scalars
    for k, v in data.items():
        if isinstance(v, dict):
            out.append(to_toml(v, f"{prefix}.{json.dumps(k)}" if prefix else json.dumps(k)))
    return "\n".join(out) + "\n"
