"""Load and validate a study file; every mistake becomes one line naming file, field and fix."""

from __future__ import annotations

import itertools
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from isobench.errors import UserError
from isobench.hostinfo import host_cpus
from isobench.study.model import Knobs, Study

DEFAULT_STUDY = "default"


def _field_path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += ("." if path else "") + str(part)
    return path


def _fix_for(error: dict[str, Any]) -> str:
    ctx = error.get("ctx") or {}
    kind = error["type"]
    if kind == "greater_than":
        return f"use a value greater than {ctx.get('gt')}"
    if kind == "greater_than_equal":
        return f"use a value of at least {ctx.get('ge')}"
    if kind in ("less_than", "less_than_equal"):
        return f"use a value of at most {ctx.get('le', ctx.get('lt'))}"
    if kind == "extra_forbidden":
        return "remove it, or check its spelling (see `isobench workloads` and the README)"
    if kind == "missing":
        return "add it"
    if kind == "literal_error":
        return f"use {ctx.get('expected')}"
    if kind == "too_short":
        return "list at least one entry"
    if kind == "string_pattern_mismatch":
        return "use letters, digits, '.', '_' or '-'"
    return "see the README's 'Study files' section"


def _from_validation(err: ValidationError, file: str, prefix: str = "") -> UserError:
    first = err.errors()[0]
    field = _field_path(tuple(first["loc"]))
    if prefix:
        field = f"{prefix}.{field}" if field else prefix
    message = first["msg"].removeprefix("Value error, ")
    fix = _fix_for(first)
    if "; fix: " in message:  # our own validators carry their fix
        message, fix = message.split("; fix: ", 1)
    value = first.get("input")
    if first["type"] not in ("missing",) and not isinstance(value, dict | list):
        message = f"{message} (got {value!r})"
    return UserError(message, file=file, field=field or None, fix=fix)


def knob_combinations(values: dict[str, Any]) -> list[dict[str, Any]]:
    """Expand list-valued knobs into their product, in a stable order."""
    keys = sorted(values)
    axes = [values[k] if isinstance(values[k], list) else [values[k]] for k in keys]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*axes)]


def _check_knobs(values: dict[str, Any], file: str, field: str, check_host: bool) -> None:
    cpus = host_cpus()
    for knob, value in values.items():
        if isinstance(value, list) and not value:
            raise UserError("an empty sweep list", file=file, field=f"{field}.{knob}",
                            fix="give at least one value")
    for combo in knob_combinations(values):
        try:
            knobs = Knobs(**combo)
        except ValidationError as err:
            raise _from_validation(err, file, field) from None
        if not check_host:
            continue
        from isobench.plan.placement import resolve_knobs

        resolve_knobs({k: v for k, v in combo.items() if v is not None}, field, file)
        if knobs.cpus is not None and knobs.cpus > len(cpus):
            raise UserError(f"{knobs.cpus} cores asked for, this host has {len(cpus)}", file=file,
                            field=f"{field}.cpus", fix=f"use a value up to {len(cpus)}")
        wanted = knobs.cpuset_list() or []
        missing = [c for c in wanted if c not in cpus]
        if missing:
            have = ",".join(map(str, cpus))
            raise UserError(f"cpuset names core(s) {missing} that this host lacks", file=file,
                            field=f"{field}.cpuset", fix=f"use cores among {have}")


def validate_study(raw: Any, file: str, check_host: bool = True) -> Study:
    """Validate a study; ``check_host=False`` skips what depends on this host (core counts),
    for reading a stored study on another machine."""
    from isobench.platforms import PLATFORMS
    from isobench.workloads import WORKLOADS

    if not isinstance(raw, dict):
        raise UserError("the study must be a YAML mapping", file=file,
                        fix="start with `name:`, `workloads:` and `platforms:`")
    try:
        study = Study(**raw)
    except ValidationError as err:
        raise _from_validation(err, file) from None
    except TypeError as err:
        raise UserError(str(err), file=file, fix="check the study's top-level keys") from None

    for index, entry in enumerate(study.workloads):
        field = f"workloads[{index}]"
        if entry.name not in WORKLOADS:
            raise UserError(f"unknown workload {entry.name!r}", file=file, field=f"{field}.name",
                            fix=f"use one of {', '.join(WORKLOADS.names())} (see `isobench workloads`)")
        params_cls = WORKLOADS.get(entry.name).Params
        sweep_keys = sorted(entry.sweep)
        for values in itertools.product(*(entry.sweep[k] for k in sweep_keys)):
            params = {**entry.params, **dict(zip(sweep_keys, values, strict=True))}
            try:
                parsed = params_cls(**params)
            except ValidationError as err:
                raise _from_validation(err, file, f"{field}.params") from None
            if check_host:  # e.g. the user's script must exist here; not when reading stored results
                try:
                    WORKLOADS.get(entry.name).check_host(parsed)
                except ValueError as err:
                    message, _, fix = str(err).partition("; fix: ")
                    name, _, problem = message.partition(": ")
                    raise UserError(problem or name, file=file, field=f"{field}.params.{name}" if problem
                                    else f"{field}.params", fix=fix or None) from None

    _check_knobs(study.knobs, file, "knobs", check_host)
    for index, entry in enumerate(study.platforms):
        field = f"platforms[{index}]"
        if entry.name not in PLATFORMS:
            raise UserError(f"unknown platform {entry.name!r}", file=file, field=f"{field}.name",
                            fix=f"use one of {', '.join(PLATFORMS.names())} (see `isobench platforms`)")
        _check_knobs({**study.knobs, **entry.knobs}, file, f"{field}.knobs", check_host)
        try:
            PLATFORMS.get(entry.name).validate_entry(entry)
            for combo in knob_combinations({**study.knobs, **entry.knobs}):
                PLATFORMS.get(entry.name).validate_knobs(combo)
        except ValueError as err:
            raise UserError(str(err), file=file, field=field) from None

    keys = [p.key for p in study.platforms]
    if study.baseline not in keys:
        raise UserError(f"baseline {study.baseline!r} names no platform entry", file=file,
                        field="baseline", fix=f"use one of {', '.join(keys)}")
    return study


def load_study_text(text: str, file: str, check_host: bool = True) -> Study:
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        problem = getattr(err, "problem", None) or "malformed YAML"
        raise UserError(f"malformed YAML at {where}: {problem}", file=file,
                        fix="check indentation and quoting there") from None
    return validate_study(raw, file, check_host)


def default_study_text() -> str:
    return resources.files("isobench.studies").joinpath(f"{DEFAULT_STUDY}.yaml").read_text()


def builtin_studies() -> list[str]:
    return sorted(p.name.removesuffix(".yaml") for p in resources.files("isobench.studies").iterdir()
                  if p.name.endswith(".yaml"))


def load_study(path: str | Path | None) -> tuple[Study, str, str]:
    """Return (study, its source text, the name to show for the file)."""
    if path is None:
        path = DEFAULT_STUDY
    candidate = Path(path)
    if not candidate.exists() and str(path) in builtin_studies():
        name = f"<built-in study {path}>"
        text = resources.files("isobench.studies").joinpath(f"{path}.yaml").read_text()
        return load_study_text(text, name), text, name
    try:
        text = candidate.read_text()
    except FileNotFoundError:
        raise UserError("no such file", file=str(path),
                        fix=f"give a path to a YAML study, or one of {', '.join(builtin_studies())}") from None
    except OSError as err:
        raise UserError(f"cannot read it: {err.strerror}", file=str(path)) from None
    return load_study_text(text, str(path)), text, str(path)
