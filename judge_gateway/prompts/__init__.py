"""Versioned, hash-locked prompt templates for the VLM judges.

A template is one TOML file `prompts/<family>/<version>.toml`. A released version is immutable:
`templates.lock` records the SHA-256 of every released file, `verify_lock()` reports drift, and
`load_template()` refuses a released template whose bytes changed. New wording means a new
version file plus a lock entry (`lock_new_templates()`). Configs pin `family@version`.

Your own families live in your own folders (`[prompts] dirs`), each with its own `templates.lock`,
checked the same way; the functions that look templates up take those folders as `dirs`.
`new_template()` starts a family (or its next version) from a released template.

The package face: template.py (the object, rendering), parse.py (a file's TOML, validated),
lock.py (the lock file's hashes), registry.py (lookup by family@version in the package's and your
folders, the lock checks), derive.py (a new template from a released one).
The paths, TEMPLATES_DIR and LOCK_PATH, live in `prompts.registry` alone, whose functions read
them at call time: a test points `registry.TEMPLATES_DIR` and `registry.LOCK_PATH` at a copy. This
face does not re-export them, as setting a copy here would change nothing.
"""

from __future__ import annotations

from .derive import new_template
from .parse import TEMPLATE_KINDS
from .registry import (
    TemplateDirs,
    family_versions,
    list_templates,
    load_template,
    lock_new_templates,
    parse_ref,
    show_template,
    verify_lock,
)
from .template import MEDIA_SLOTS, Aspect, Template, TemplateError

__all__ = [
    "MEDIA_SLOTS",
    "TEMPLATE_KINDS",
    "Aspect",
    "Template",
    "TemplateDirs",
    "TemplateError",
    "family_versions",
    "list_templates",
    "load_template",
    "lock_new_templates",
    "new_template",
    "parse_ref",
    "show_template",
    "verify_lock",
]
